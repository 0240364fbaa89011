package store

import (
	"fmt"
	"testing"
)

// TestS3FIFOQueues follows one key through the core's queues, with unit
// sizes so the byte budget counts entries: 20 of them, small's share 2.
func TestS3FIFOQueues(t *testing.T) {
	const capacity = 20
	fill := func(c *s3fifo, now int64) (reclaimed int) {
		for i := range capacity {
			_, n := c.put(fmt.Sprint("fill-", i), &Object{}, 1, now, capacity)
			reclaimed += n
		}
		return reclaimed
	}
	tests := []struct {
		name                   string
		run                    func(c *s3fifo) (reclaimed int)
		present, inMain, ghost bool
		wantReclaimed          int
	}{
		{
			name: "unread key leaves small as a ghost",
			run: func(c *s3fifo) int {
				c.put("k", &Object{}, 1, 0, capacity)
				return fill(c, 0)
			},
			ghost: true,
		},
		{
			name: "key read in small moves to main",
			run: func(c *s3fifo) int {
				c.put("k", &Object{}, 1, 0, capacity)
				e, _ := c.lookup("k", func() int64 { return 0 })
				c.hit(e)
				return fill(c, 0)
			},
			present: true, inMain: true,
		},
		{
			name: "returning ghost goes straight to main",
			run: func(c *s3fifo) int {
				c.put("k", &Object{}, 1, 0, capacity)
				n := fill(c, 0)
				c.put("k", &Object{}, 1, 0, capacity)
				return n
			},
			present: true, inMain: true,
		},
		{
			name: "expired key is reclaimed, not remembered",
			run: func(c *s3fifo) int {
				c.put("k", &Object{Expires: 5}, 1, 0, capacity)
				return fill(c, 10)
			},
			wantReclaimed: 1,
		},
		{
			name: "expired key is reclaimed by a read",
			run: func(c *s3fifo) int {
				c.put("k", &Object{Expires: 5}, 1, 0, capacity)
				if e, reclaimed := c.lookup("k", func() int64 { return 10 }); e == nil && reclaimed {
					return 1
				}
				return 0
			},
			wantReclaimed: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newS3FIFO(capacity)
			reclaimed := tt.run(&c)
			e, present := c.items["k"]
			_, ghost := c.ghost["k"]
			if present != tt.present || ghost != tt.ghost || reclaimed != tt.wantReclaimed {
				t.Fatalf("present %v, ghost %v, reclaimed %d; want %v, %v, %d",
					present, ghost, reclaimed, tt.present, tt.ghost, tt.wantReclaimed)
			}
			if present && e.main != tt.inMain {
				t.Fatalf("in main: %v, want %v", e.main, tt.inMain)
			}
			if c.bytes > capacity || c.bytes != int64(len(c.items)) {
				t.Fatalf("%d bytes for %d unit entries, capacity %d", c.bytes, len(c.items), capacity)
			}
		})
	}
}
