package resp

import "testing"

func TestAppendReplies(t *testing.T) {
	tests := []struct {
		name string
		got  []byte
		want string
	}{
		{"simple", appendSimple(nil, "OK"), "+OK\r\n"},
		{"error", appendError(nil, "ERR bad"), "-ERR bad\r\n"},
		{"error with CRLF inside", appendError(nil, "ERR a\r\n+OK"), "-ERR a  +OK\r\n"},
		{"int", appendInt(nil, 42), ":42\r\n"},
		{"negative int", appendInt(nil, -2), ":-2\r\n"},
		{"null", appendNull(nil), "$-1\r\n"},
		{"array", appendArray(nil, 3), "*3\r\n"},
		{"empty array", appendArray(nil, 0), "*0\r\n"},
		{"bulk header", appendBulkHeader(nil, 1048576), "$1048576\r\n"},
		{"bulk", appendBulk(nil, []byte("hi")), "$2\r\nhi\r\n"},
		{"empty bulk", appendBulk(nil, nil), "$0\r\n\r\n"},
		{"appends", appendInt(appendSimple([]byte("x"), "A"), 1), "x+A\r\n:1\r\n"},
		// RESP3 (https://github.com/redis/redis-specifications/blob/master/protocol/RESP3.md)
		{"resp3 null", appendNull3(nil), "_\r\n"},
		{"resp3 map", appendMap(nil, 7), "%7\r\n"},
		{"resp3 empty map", appendMap(nil, 0), "%0\r\n"},
		{"resp3 map of one pair", appendBulk(appendBulk(appendMap(nil, 1), []byte("k")), nil), "%1\r\n$1\r\nk\r\n$0\r\n\r\n"},
		{"resp3 null in an array", appendNull3(appendArray(nil, 1)), "*1\r\n_\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if string(tt.got) != tt.want {
				t.Fatalf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
}
