package lmproto

import (
	"errors"
	"io"
)

// readStep is the first allocation for a value: a typical LMCache chunk
// (256 tokens of an 8B model, about 4 MiB) fits it whole, so it is read
// with no copy.
const readStep = 4 << 20

// readGrowth is how much a value's buffer grows once full. A large factor
// keeps the copies few (a 32 MiB value is copied once, 4 MiB of it); the
// buffer still never exceeds readGrowth times what arrived.
const readGrowth = 8

// ReadValue reads exactly n bytes from r into a slice of capacity n (the
// store keeps it as is). The buffer is not allocated from the announced
// length up front: it starts at 4 MiB and grows eightfold, never past n,
// only once the bytes already allocated have arrived. A peer that
// announces a large value and sends little thus costs at most eight times
// what it sent, plus 4 MiB, not what it announced.
//
// On a short read it returns the bytes that came and io.ErrUnexpectedEOF
// (or r's error).
func ReadValue(r io.Reader, n int) ([]byte, error) { return readValue(r, n, nil) }

// reserveStep is how far ahead of the bytes that arrived readValue
// reserves: a stalled peer holds at most this much reserved beyond what it
// sent, while a value arriving at full speed costs one reservation per step.
const reserveStep = 256 << 10

// readValue is ReadValue that calls reserve, when set, for the bytes about
// to be read, at most reserveStep at a time, before reading them: what a
// server counts against its memory follows what arrives, not what a header
// announced (the buffer's untouched capacity is address space, not
// resident memory). The reservations add up to n once the value is whole.
// A reserve error ends the read with it.
func readValue(r io.Reader, n int, reserve func(int) error) ([]byte, error) {
	buf := make([]byte, 0, min(n, readStep))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(readGrowth*cap(buf), n))
			copy(grown, buf)
			buf = grown
		}
		end := cap(buf)
		if reserve != nil {
			end = min(end, len(buf)+reserveStep)
			if err := reserve(end - len(buf)); err != nil {
				return buf, err
			}
		}
		m, err := io.ReadFull(r, buf[len(buf):end])
		buf = buf[:len(buf)+m]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // EOF inside a value is never clean
			}
			return buf, err
		}
	}
	return buf, nil
}
