package proxy

import (
	"bytes"
	"errors"
	"io"
)

// eventCutter passes a server-sent-event body on in whole events: it
// returns bytes up to the end of the last blank line read and holds an
// incomplete event back until its end arrives. So when the worker's body
// breaks, what the client got ends at an event boundary, and an error
// event can follow that the client parses (a cut inside an event would
// leave it half a JSON line). An event that fills the whole buffer with no
// end in sight is passed on as it comes (Clean says so).
type eventCutter struct {
	r   io.Reader
	buf []byte // read, not yet returned; its capacity bounds a held event
	// ready is how many of buf's bytes may be returned: whole events, or
	// a passed-on part of an oversize one.
	ready int
	// whole says buf[:ready] ends at an event boundary (not a passed-on
	// part of an oversize event, nor the body's unterminated end).
	whole bool
	err   error // the read error that follows buf's bytes
	clean bool  // the bytes returned so far end at an event boundary
}

// newEventCutter reads r through buf's capacity; buf may already hold the
// body's first bytes.
func newEventCutter(r io.Reader, buf []byte) *eventCutter {
	e := &eventCutter{r: r, buf: buf, clean: true, whole: true}
	e.ready = eventEnd(buf)
	return e
}

// Read implements io.Reader. Its error, once the whole events before it
// were returned, is the body's; an incomplete event before a failure is
// dropped, one before io.EOF is returned as it is.
func (e *eventCutter) Read(p []byte) (int, error) {
	for e.ready == 0 {
		switch {
		case e.err != nil && errors.Is(e.err, io.EOF) && len(e.buf) > 0:
			e.ready, e.whole = len(e.buf), false // the body ended: nothing more to wait for
			continue
		case e.err != nil:
			return 0, e.err
		case len(e.buf) == cap(e.buf):
			e.ready, e.whole = len(e.buf), false // an oversize event: pass it on
			continue
		}
		n, err := e.r.Read(e.buf[len(e.buf):cap(e.buf)])
		e.buf = e.buf[:len(e.buf)+n]
		e.err = err
		e.ready, e.whole = eventEnd(e.buf), true
	}
	n := copy(p, e.buf[:e.ready])
	e.clean = n == e.ready && e.whole
	e.buf = e.buf[:copy(e.buf, e.buf[n:])]
	e.ready -= n
	return n, nil
}

// Clean says the bytes returned so far end at an event boundary.
func (e *eventCutter) Clean() bool { return e.clean }

// eventEnd is the length of b's whole events: up to the end of its last
// blank line ("\n\n" or "\r\n\r\n"), 0 without one.
func eventEnd(b []byte) int {
	end := 0
	if i := bytes.LastIndex(b, []byte("\n\n")); i >= 0 {
		end = i + 2
	}
	if i := bytes.LastIndex(b, []byte("\n\r\n")); i >= 0 {
		end = max(end, i+3)
	}
	return end
}
