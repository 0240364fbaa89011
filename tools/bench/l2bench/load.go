package l2bench

import (
	"context"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"
)

// result is one target's throughput and GET latency under the mix.
type result struct {
	GetGBps, SetGBps, GetP99ms float64
	Errors                     int
}

// load runs the 80/20 mix on conns clients for d.
func load(ctx context.Context, mk func() client, conns int, size int, d time.Duration) result {
	val := make([]byte, size)
	for i := range val {
		val[i] = byte(i)
	}
	const keys = 8
	seed := mk()
	for k := range keys {
		_ = seed.set(ctx, "bench-"+strconv.Itoa(k), val)
	}
	var mu sync.Mutex
	var getBytes, setBytes int64
	var lat []float64
	errs := 0
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range conns {
		wg.Go(func() {
			c := mk()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			var gb, sb int64
			var l []float64
			e := 0
			for time.Now().Before(end) {
				key := "bench-" + strconv.Itoa(r.IntN(keys))
				if r.IntN(10) < 8 {
					t0 := time.Now()
					n, err := c.get(ctx, key)
					if err != nil {
						e++
						continue
					}
					l = append(l, float64(time.Since(t0).Microseconds())/1e3)
					gb += int64(n)
				} else {
					if err := c.set(ctx, key, val); err != nil {
						e++
						continue
					}
					sb += int64(size)
				}
			}
			mu.Lock()
			getBytes += gb
			setBytes += sb
			lat = append(lat, l...)
			errs += e
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(lat)
	res := result{GetGBps: float64(getBytes) / d.Seconds() / 1e9, SetGBps: float64(setBytes) / d.Seconds() / 1e9, Errors: errs}
	if len(lat) > 0 {
		res.GetP99ms = lat[len(lat)*99/100]
	}
	return res
}

// tcpCeiling is a raw transfer: each request (4-byte length) gets that
// many bytes back from a preallocated buffer.
func tcpCeiling(ctx context.Context, conns, size int, d time.Duration) (float64, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	buf := make([]byte, size)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var hdr [4]byte
				for {
					if _, err := io.ReadFull(c, hdr[:]); err != nil {
						return
					}
					if _, err := c.Write(buf[:binary.LittleEndian.Uint32(hdr[:])]); err != nil {
						return
					}
				}
			}()
		}
	}()
	var total int64
	var mu sync.Mutex
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
			if err != nil {
				return
			}
			defer c.Close()
			rb := make([]byte, size)
			var hdr [4]byte
			binary.LittleEndian.PutUint32(hdr[:], uint32(size))
			var n int64
			for time.Now().Before(end) {
				if _, err := c.Write(hdr[:]); err != nil {
					return
				}
				if _, err := io.ReadFull(c, rb); err != nil {
					return
				}
				n += int64(size)
			}
			mu.Lock()
			total += n
			mu.Unlock()
		})
	}
	wg.Wait()
	return float64(total) / d.Seconds() / 1e9, nil
}
