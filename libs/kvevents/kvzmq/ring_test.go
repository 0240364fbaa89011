package kvzmq

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/warmpath/warmpath/libs/kvevents"
)

func TestRing(t *testing.T) {
	tests := []struct {
		name  string
		limit int
		push  int
		since uint64
		want  []uint64
	}{
		{"disabled", 0, 5, 0, nil},
		{"not full", 4, 3, 0, []uint64{0, 1, 2}},
		{"not full, middle", 4, 3, 1, []uint64{1, 2}},
		{"wrapped", 4, 10, 0, []uint64{6, 7, 8, 9}},
		{"wrapped, middle", 4, 10, 8, []uint64{8, 9}},
		{"future", 4, 10, 10, nil},
		{"exactly full", 3, 3, 0, []uint64{0, 1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ring{limit: tt.limit}
			for i := range tt.push {
				r.push(kvevents.Message{Seq: uint64(i), Payload: []byte{byte(i)}})
			}
			var got []uint64
			for _, m := range r.since(tt.since) {
				if !bytes.Equal(m.Payload, []byte{byte(m.Seq)}) {
					t.Errorf("seq %d carries payload %x", m.Seq, m.Payload)
				}
				got = append(got, m.Seq)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
