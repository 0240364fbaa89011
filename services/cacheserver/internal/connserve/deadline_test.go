package connserve

import (
	"bufio"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// TestDeadlineBoundsWholeRequest: once a request's first byte has arrived,
// the rest must arrive within IO in all, however it is trickled. A
// deadline moved on by every read let a peer that sends a byte now and then
// hold a request (and what the server reserved for it) open forever.
func TestDeadlineBoundsWholeRequest(t *testing.T) {
	server, client := net.Pipe()
	defer client.Close()
	defer server.Close()
	const io = 300 * time.Millisecond
	dr := &DeadlineReader{Conn: server, Idle: time.Minute, IO: io}
	br := bufio.NewReaderSize(dr, 16)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // a byte every 50 ms: each read is quick, the request never ends
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				if _, err := client.Write([]byte{'x'}); err != nil {
					return
				}
			}
		}
	}()
	dr.Begin(br.Buffered() == 0)
	start := time.Now()
	var err error
	for err == nil && time.Since(start) < 5*time.Second {
		_, err = br.ReadByte()
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a trickled request was still being read after %s (err %v), want it cut at the %s I/O bound", time.Since(start).Round(time.Millisecond), err, io)
	}
}

// TestDeadlineIdleBetweenRequests: between requests a connection may idle
// for Idle, longer than IO.
func TestDeadlineIdleBetweenRequests(t *testing.T) {
	server, client := net.Pipe()
	defer client.Close()
	defer server.Close()
	dr := &DeadlineReader{Conn: server, Idle: 2 * time.Second, IO: 100 * time.Millisecond}
	br := bufio.NewReader(dr)
	go func() {
		time.Sleep(400 * time.Millisecond) // past IO, within Idle
		_, _ = client.Write([]byte("ab"))
	}()
	dr.Begin(br.Buffered() == 0)
	if _, err := br.ReadByte(); err != nil {
		t.Fatalf("a request that began after an idle pause within Idle: %v", err)
	}
}
