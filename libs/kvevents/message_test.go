package kvevents

import (
	"errors"
	"reflect"
	"testing"
)

func TestParseMessage(t *testing.T) {
	tests := []struct {
		name    string
		frames  [][]byte
		want    Message
		wantErr bool
	}{
		{"ok", [][]byte{[]byte("kv@pod@m"), {0, 0, 0, 0, 0, 0, 1, 2}, {0x92}}, Message{"kv@pod@m", 258, []byte{0x92}}, false},
		{"empty topic and payload", [][]byte{{}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, {}}, Message{"", EndSeq, []byte{}}, false},
		{"two frames", [][]byte{{}, {0, 0, 0, 0, 0, 0, 0, 1}}, Message{}, true},
		{"four frames", [][]byte{{}, {0, 0, 0, 0, 0, 0, 0, 1}, {}, {}}, Message{}, true},
		{"short seq", [][]byte{{}, {0, 0, 0, 0, 0, 0, 1}, {}}, Message{}, true},
		{"long seq", [][]byte{{}, {0, 0, 0, 0, 0, 0, 0, 0, 1}, {}}, Message{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseMessage(tt.frames)
			if tt.wantErr {
				if !errors.Is(err, ErrFrames) {
					t.Fatalf("got error %v, want one wrapping ErrFrames", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseMessage: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if frames := got.Frames(); !reflect.DeepEqual(frames, tt.frames) {
				t.Errorf("Frames: got %q, want %q", frames, tt.frames)
			}
		})
	}
}

func TestParseReplay(t *testing.T) {
	seq5 := []byte{0, 0, 0, 0, 0, 0, 0, 5}
	end := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	tests := []struct {
		name    string
		frames  [][]byte
		want    Message
		wantEnd bool
		wantErr bool
	}{
		{"with topic", [][]byte{{}, []byte("t"), seq5, {1}}, Message{"t", 5, []byte{1}}, false, false},
		{"without topic", [][]byte{{}, seq5, {1}}, Message{"", 5, []byte{1}}, false, false},
		{"end with topic", [][]byte{{}, []byte("t"), end, {}}, Message{"t", EndSeq, []byte{}}, true, false},
		{"end without topic", [][]byte{{}, end, {}}, Message{"", EndSeq, []byte{}}, true, false},
		{"end, first vLLM", [][]byte{{}, {}}, Message{}, true, false},
		{"max seq with payload is data", [][]byte{{}, end, {1}}, Message{"", EndSeq, []byte{1}}, false, false},
		{"no delimiter", [][]byte{[]byte("t"), seq5, {1}}, Message{}, false, true},
		{"delimiter only", [][]byte{{}}, Message{}, false, true},
		{"bad seq", [][]byte{{}, {1}, {1}}, Message{}, false, true},
		{"too many", [][]byte{{}, {}, {}, {}, {}}, Message{}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, end, err := ParseReplayReply(tt.frames)
			if tt.wantErr {
				if !errors.Is(err, ErrFrames) {
					t.Fatalf("got error %v, want one wrapping ErrFrames", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseReplayReply: %v", err)
			}
			if end != tt.wantEnd || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v end=%v, want %+v end=%v", got, end, tt.want, tt.wantEnd)
			}
		})
	}
}
