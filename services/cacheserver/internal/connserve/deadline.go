package connserve

import (
	"net"
	"time"
)

// DeadlineReader reads a connection of a request/reply protocol: it arms
// Idle before a request's first byte and IO for the rest, so a client may
// idle between requests (LMCache keeps one connection open) but not
// trickle one in forever. The server sets AtBoundary before reading each
// request (true when nothing of the next one is buffered yet).
type DeadlineReader struct {
	Conn       net.Conn
	Idle, IO   time.Duration
	AtBoundary bool
}

func (d *DeadlineReader) Read(p []byte) (int, error) {
	t := d.IO
	if d.AtBoundary {
		t = d.Idle
		d.AtBoundary = false
	}
	_ = d.Conn.SetReadDeadline(time.Now().Add(t))
	return d.Conn.Read(p)
}
