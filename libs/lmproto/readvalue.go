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
// what it sent, plus 4 MiB, not what it announced (and a server that
// reserves announced sizes against its capacity bounds the sum).
//
// On a short read it returns the bytes that came and io.ErrUnexpectedEOF
// (or r's error).
func ReadValue(r io.Reader, n int) ([]byte, error) {
	buf := make([]byte, 0, min(n, readStep))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(readGrowth*cap(buf), n))
			copy(grown, buf)
			buf = grown
		}
		m, err := io.ReadFull(r, buf[len(buf):cap(buf)])
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
