package connserve

import (
	"net"
	"time"
)

// DeadlineReader reads a connection of a request/reply protocol. Before a
// request's first byte the connection may idle for Idle (LMCache keeps one
// connection open between requests); from that byte on, the whole request
// must arrive within IO. The deadline is set once per request, not moved
// on by each read: otherwise a peer sending a byte now and then holds a
// request, and whatever the server set aside for it, open forever.
//
// The server calls Begin before reading each request.
type DeadlineReader struct {
	Conn     net.Conn
	Idle, IO time.Duration

	atBoundary bool // waiting for a request's first byte
}

// Begin starts a request. atBoundary is true when none of it is buffered
// yet: the idle deadline then applies until its first byte. Otherwise (a
// pipelined request already in the buffer) it has begun, and its I/O
// deadline starts now.
func (d *DeadlineReader) Begin(atBoundary bool) {
	d.atBoundary = atBoundary
	if !atBoundary {
		_ = d.Conn.SetReadDeadline(time.Now().Add(d.IO))
	}
}

func (d *DeadlineReader) Read(p []byte) (int, error) {
	if !d.atBoundary {
		return d.Conn.Read(p)
	}
	_ = d.Conn.SetReadDeadline(time.Now().Add(d.Idle))
	n, err := d.Conn.Read(p)
	if n > 0 {
		d.atBoundary = false
		_ = d.Conn.SetReadDeadline(time.Now().Add(d.IO))
	}
	return n, err
}
