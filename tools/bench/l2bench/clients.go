package l2bench

import (
	"context"
	"errors"
	"io"
	"slices"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/warmpath/warmpath/libs/lmproto"
)

// client is one connection's GET and SET.
type client interface {
	get(ctx context.Context, key string) (int, error)
	set(ctx context.Context, key string, val []byte) error
}

// respClient is go-redis: it allocates every GET reply, as most RESP
// clients (redis-py, under LMCache's redis connector, too) do.
type respClient struct{ c *redis.Client }

func (r respClient) get(ctx context.Context, key string) (int, error) {
	b, err := r.c.Get(ctx, key).Bytes()
	return len(b), err
}
func (r respClient) set(ctx context.Context, key string, val []byte) error {
	return r.c.Set(ctx, key, val, 0).Err()
}

// respStreamClient is rueidis streaming each reply into one reused
// buffer (DoStream), as lmClient reads over lm://: the client then costs a
// copy out of the socket and no allocation, so on two shared cores the
// servers, not the client's allocator, set the pace. Both commands go over
// the one dedicated connection DoStream uses.
type respStreamClient struct {
	c   rueidis.Client
	buf *sliceWriter
}

// sliceWriter appends to a slice whose capacity is kept between replies.
type sliceWriter struct{ b []byte }

func (w *sliceWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// ReadFrom lets io.Copy read a reply straight into the kept capacity, in
// reads as large as the socket gives, instead of through the client's
// read buffer in small pieces.
func (w *sliceWriter) ReadFrom(r io.Reader) (int64, error) {
	var n int64
	for {
		if len(w.b) == cap(w.b) {
			w.b = slices.Grow(w.b, max(cap(w.b), 64<<10))
		}
		m, err := r.Read(w.b[len(w.b):cap(w.b)])
		w.b = w.b[:len(w.b)+m]
		n += int64(m)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func (r respStreamClient) get(ctx context.Context, key string) (int, error) {
	r.buf.b = r.buf.b[:0]
	st := r.c.DoStream(ctx, r.c.B().Get().Key(key).Build())
	n, err := st.WriteTo(r.buf)
	return int(n), err
}

func (r respStreamClient) set(ctx context.Context, key string, val []byte) error {
	st := r.c.DoStream(ctx, r.c.B().Set().Key(key).Value(rueidis.BinaryString(val)).Build())
	_, err := st.WriteTo(io.Discard)
	return err
}

// lmClient reads every value into one buffer, as LMCache's client reads
// into a preallocated tensor.
type lmClient struct {
	c   *lmproto.Client
	buf *[]byte
}

func (l lmClient) get(ctx context.Context, key string) (int, error) {
	b, _, err := l.c.GetInto(ctx, key, *l.buf)
	if cap(b) > cap(*l.buf) {
		*l.buf = b
	}
	return len(b), err
}
func (l lmClient) set(ctx context.Context, key string, val []byte) error {
	return l.c.Put(ctx, key, lmproto.Meta{Dtype: 3}, val)
}

// failing is a client that could not be made: every call fails, and the
// run counts the errors.
type failing struct{ err error }

func (f failing) get(context.Context, string) (int, error)  { return 0, f.err }
func (f failing) set(context.Context, string, []byte) error { return f.err }
