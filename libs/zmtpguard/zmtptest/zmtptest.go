// Package zmtptest builds the ZMTP 3.0 bytes that tests of hostile peers
// send: a NULL greeting, a READY command and frame headers announcing any
// size, and the oversize-frame attacks the router's suites replay.
package zmtptest

import "encoding/binary"

// ZMTP frame flags (23/ZMTP).
const (
	FlagMore    = 0x01
	FlagLong    = 0x02
	FlagCommand = 0x04
)

// Greeting is a ZMTP 3.0 greeting of the NULL mechanism, as zmq4 sends it.
func Greeting() []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10], g[11] = 0xFF, 0x7F, 3, 0
	copy(g[12:32], "NULL")
	return g
}

// Ready is the NULL mechanism's READY command of a socket of socketType
// ("PUB", "SUB", ...).
func Ready(socketType string) []byte {
	body := []byte{5}
	body = append(body, "READY"...)
	body = append(body, byte(len("Socket-Type")))
	body = append(body, "Socket-Type"...)
	body = binary.BigEndian.AppendUint32(body, uint32(len(socketType)))
	body = append(body, socketType...)
	return append([]byte{FlagCommand, byte(len(body))}, body...)
}

// LongHeader is the header of a frame announcing size bytes.
func LongHeader(flags byte, size uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{flags | FlagLong}, size)
}

// Attack is a payload a hostile peer sends on a fresh connection.
type Attack struct {
	Name    string
	Payload []byte
}

// OversizeAttacks announce frames of 4 GiB and 1 TiB from a PUB, before the
// handshake (as a command, read while the connection opens) and after it
// (as a message).
func OversizeAttacks() []Attack {
	var out []Attack
	for _, size := range []struct {
		name string
		n    uint64
	}{{"4GiB", 4 << 30}, {"1TiB", 1 << 40}} {
		out = append(out,
			Attack{"before handshake " + size.name, append(Greeting(), LongHeader(FlagCommand, size.n)...)},
			Attack{"after handshake " + size.name, append(append(Greeting(), Ready("PUB")...), LongHeader(0, size.n)...)},
		)
	}
	return out
}
