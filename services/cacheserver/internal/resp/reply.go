package resp

import (
	"strconv"
	"strings"
)

// Reply encoding: pure functions appending RESP2 and RESP3 to a buffer,
// as libs/lmproto encodes lm://. A RESP3 connection (after HELLO 3) gets
// the same encoders but for the types RESP3 adds: the null (appendNull3)
// and the map (appendMap); everything else is encoded alike in both. A bulk string's value is not among them:
// the connection writes it straight from the store after its header, so
// a large value is never copied.

// appendSimple appends a status reply (+OK).
func appendSimple(b []byte, s string) []byte {
	b = append(b, '+')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// appendError appends an error reply; CR and LF, which would end it early
// and let the rest pass for another reply, become spaces.
func appendError(b []byte, s string) []byte {
	b = append(b, '-')
	b = append(b, sanitize(s)...)
	return append(b, '\r', '\n')
}

// appendInt appends an integer reply.
func appendInt(b []byte, n int64) []byte {
	b = append(b, ':')
	b = strconv.AppendInt(b, n, 10)
	return append(b, '\r', '\n')
}

// appendNull appends the null bulk string (a missing key).
func appendNull(b []byte) []byte { return append(b, "$-1\r\n"...) }

// appendNull3 appends RESP3's null (a missing key after HELLO 3).
func appendNull3(b []byte) []byte { return append(b, "_\r\n"...) }

// appendMap appends a RESP3 map header of n key-value pairs; 2n elements
// must follow. (In RESP2 a map is an array of 2n elements.)
func appendMap(b []byte, n int) []byte {
	b = append(b, '%')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

// appendArray appends an array header of n elements.
func appendArray(b []byte, n int) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

// appendBulkHeader appends a bulk string's header; its n bytes and a CRLF
// must follow.
func appendBulkHeader(b []byte, n int) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

// appendBulk appends a whole bulk string: for small values only.
func appendBulk(b, v []byte) []byte {
	b = appendBulkHeader(b, len(v))
	b = append(b, v...)
	return append(b, '\r', '\n')
}

var crlf = strings.NewReplacer("\r", " ", "\n", " ")

func sanitize(s string) string { return crlf.Replace(s) }
