package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// EndSeq is the sequence number of the replay end marker (-1 as a signed
// 64-bit integer in vLLM). Publishers never assign it to a batch.
const EndSeq uint64 = math.MaxUint64

// ErrFrames is wrapped by ParseMessage errors.
var ErrFrames = errors.New("kvevents: bad message frames")

// Message is one ZMQ message of the event stream: the frames [topic, seq as
// 8 bytes big-endian, msgpack payload]. Seq counts from 0 in each publisher
// process, so a backwards jump means the engine restarted.
type Message struct {
	Topic   string
	Seq     uint64
	Payload []byte
}

// Frames returns the three frames of m. The payload frame is m.Payload
// itself, not a copy.
func (m Message) Frames() [][]byte {
	return [][]byte{[]byte(m.Topic), binary.BigEndian.AppendUint64(nil, m.Seq), m.Payload}
}

// IsEnd reports whether m is a replay end marker: seq EndSeq, empty payload.
func (m Message) IsEnd() bool {
	return m.Seq == EndSeq && len(m.Payload) == 0
}

// ParseMessage parses the frames of a message received on a SUB socket. It
// requires exactly three frames and an 8-byte sequence frame. The returned
// Payload aliases frames[2]; the caller must not modify that frame while
// using the Message.
func ParseMessage(frames [][]byte) (Message, error) {
	if len(frames) != 3 {
		return Message{}, fmt.Errorf("%w: %d frames, want 3", ErrFrames, len(frames))
	}
	seq, err := parseSeq(frames[1])
	if err != nil {
		return Message{}, err
	}
	return Message{Topic: string(frames[0]), Seq: seq, Payload: frames[2]}, nil
}

func parseSeq(frame []byte) (uint64, error) {
	if len(frame) != 8 {
		return 0, fmt.Errorf("%w: sequence frame of %d bytes, want 8", ErrFrames, len(frame))
	}
	return binary.BigEndian.Uint64(frame), nil
}

// ParseReplayReply parses one reply of a replay socket as a DEALER
// receives it: ["", topic, seq, payload], ["", seq, payload] (before
// v0.26) or, from the first vLLM versions, [""] alone as the end marker.
// It is framing alone, apart from the transport (kvzmq.Replay), so that it
// is fuzzed with ParseMessage.
func ParseReplayReply(frames [][]byte) (m Message, end bool, err error) {
	if len(frames) < 2 || len(frames[0]) != 0 {
		return Message{}, false, fmt.Errorf("%w: replay reply without empty delimiter", ErrFrames)
	}
	rest := frames[1:]
	switch len(rest) {
	case 1:
		if len(rest[0]) == 0 {
			return Message{}, true, nil
		}
	case 2:
		m.Seq, err = parseSeq(rest[0])
		m.Payload = rest[1]
		return m, err == nil && m.IsEnd(), err
	case 3:
		m.Topic = string(rest[0])
		m.Seq, err = parseSeq(rest[1])
		m.Payload = rest[2]
		return m, err == nil && m.IsEnd(), err
	}
	return Message{}, false, fmt.Errorf("%w: replay reply of %d frames", ErrFrames, len(frames))
}
