package lmproto

import (
	"errors"
	"io"
)

// readStep is the first allocation for a value, and the least a value's
// buffer grows by.
const readStep = 1 << 20

// ReadValue reads exactly n bytes from r into a slice of capacity n (the
// store keeps it as is). The buffer is not allocated from the announced
// length up front: it starts at 1 MiB and doubles, never past n, only once
// the bytes already allocated have arrived. A peer that announces a large
// value and sends little thus costs about what it sent (at most twice
// that, plus 1 MiB), not what it announced. The doubling copies the value
// at most about once more in total.
//
// On a short read it returns the bytes that came and io.ErrUnexpectedEOF
// (or r's error).
func ReadValue(r io.Reader, n int) ([]byte, error) {
	buf := make([]byte, 0, min(n, readStep))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(2*cap(buf), n))
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
