// Package l2remote connects the simulated LMCache to a shared L2 the way
// LMCache's remote connectors do: lm:// (LMCache's own server protocol,
// spoken by warmpath's cache server) and redis:// (the redis connector's
// key layout: "<key>kv_bytes" and "<key>metadata", against Redis or the
// cache server's RESP port).
package l2remote

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpath/warmpath/libs/lmproto"
	"github.com/warmpath/warmpath/tools/vllmsim/lmcache"
)

// dtypeBFloat16 is LMCache's dtype code for bfloat16, the KV dtype of the
// presets.
const dtypeBFloat16 = 3

// Client is a Remote that must be closed.
type Client interface {
	lmcache.Remote
	io.Closer
}

// Open returns a client for rawURL (lm://host:port or redis://[user:pass@]host:port[/db]).
// timeout bounds connecting and each call; maxValue bounds a value read.
func Open(rawURL string, timeout time.Duration, maxValue int) (Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("l2remote: %q: %w", rawURL, err)
	}
	switch u.Scheme {
	case "lm":
		if u.Host == "" {
			return nil, fmt.Errorf("l2remote: %q: want lm://host:port", rawURL)
		}
		return &LM{c: lmproto.Dial(u.Host, timeout, maxValue)}, nil
	case "redis", "rediss":
		opts, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("l2remote: %w", err)
		}
		opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = timeout, timeout, timeout
		return &Redis{c: redis.NewClient(opts)}, nil
	default:
		return nil, fmt.Errorf("l2remote: %q: scheme %q not supported (lm, redis, rediss)", rawURL, u.Scheme)
	}
}

// LM speaks lm:// over one connection, as each LMCache worker process does.
// Get reads every value into one buffer, as LMCache reads into a
// preallocated tensor: a value is valid until the next Get.
type LM struct {
	c *lmproto.Client

	mu  sync.Mutex
	buf []byte
}

func meta(n int) lmproto.Meta {
	// A 1-D bfloat16 tensor of the value's size: the server keeps it
	// opaque and returns it on GET, from which LMCache sizes its buffer.
	return lmproto.Meta{Dtype: dtypeBFloat16, Shape: [4]int32{int32(n / 2), 1, 1, 1}}
}

// Exists implements lmcache.Remote.
func (l *LM) Exists(ctx context.Context, key string) (bool, error) {
	return l.c.Exist(ctx, key)
}

// Get implements lmcache.Remote.
func (l *LM) Get(ctx context.Context, key string) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, _, err := l.c.GetInto(ctx, key, l.buf)
	if errors.Is(err, lmproto.ErrMiss) {
		return nil, lmcache.ErrMiss
	}
	if cap(v) > cap(l.buf) {
		l.buf = v
	}
	return v, err
}

// Put implements lmcache.Remote.
func (l *LM) Put(ctx context.Context, key string, value []byte) error {
	return l.c.Put(ctx, key, meta(len(value)), value)
}

// Close closes the connection.
func (l *LM) Close() error { return l.c.Close() }

// Redis uses LMCache's redis connector layout.
type Redis struct{ c *redis.Client }

const (
	bytesSuffix = "kv_bytes"
	metaSuffix  = "metadata"
)

// Exists implements lmcache.Remote: the connector asks for the metadata key.
func (r *Redis) Exists(ctx context.Context, key string) (bool, error) {
	n, err := r.c.Exists(ctx, key+metaSuffix).Result()
	return n == 1, err
}

// Get implements lmcache.Remote: metadata first, then the bytes; bytes
// gone under existing metadata are a miss and the metadata is deleted.
func (r *Redis) Get(ctx context.Context, key string) ([]byte, error) {
	if _, err := r.c.Get(ctx, key+metaSuffix).Bytes(); errors.Is(err, redis.Nil) {
		return nil, lmcache.ErrMiss
	} else if err != nil {
		return nil, fmt.Errorf("l2remote: get metadata: %w", err)
	}
	v, err := r.c.Get(ctx, key+bytesSuffix).Bytes()
	if errors.Is(err, redis.Nil) {
		if derr := r.c.Del(ctx, key+metaSuffix).Err(); derr != nil {
			return nil, fmt.Errorf("l2remote: drop orphaned metadata: %w", derr)
		}
		return nil, lmcache.ErrMiss
	}
	if err != nil {
		return nil, fmt.Errorf("l2remote: get bytes: %w", err)
	}
	return v, nil
}

// Put implements lmcache.Remote: the bytes, then the 28-byte metadata
// (length, fmt, dtype, shape as little-endian int32), so a reader that
// finds the metadata finds the bytes.
func (r *Redis) Put(ctx context.Context, key string, value []byte) error {
	m := meta(len(value))
	md := make([]byte, 0, 28)
	for _, v := range []int32{int32(len(value)), m.Fmt, m.Dtype, m.Shape[0], m.Shape[1], m.Shape[2], m.Shape[3]} {
		md = binary.LittleEndian.AppendUint32(md, uint32(v))
	}
	if err := r.c.Set(ctx, key+bytesSuffix, value, 0).Err(); err != nil {
		return fmt.Errorf("l2remote: set bytes: %w", err)
	}
	if err := r.c.Set(ctx, key+metaSuffix, md, 0).Err(); err != nil {
		return fmt.Errorf("l2remote: set metadata: %w", err)
	}
	return nil
}

// Close closes the connection pool.
func (r *Redis) Close() error { return r.c.Close() }
