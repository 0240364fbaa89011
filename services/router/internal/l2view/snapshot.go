package l2view

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// snapshot is one model's chunks on one cache server and the seq of the
// last batch they include (-1 before the first).
type snapshot struct {
	seq  int64
	keys []uint64
}

// errTooLarge is wrapped when a snapshot body is over SnapshotMaxBytes.
var errTooLarge = errors.New("snapshot body too large")

// fetchSnapshot asks a cache server's data API for model's chunks.
func (v *View) fetchSnapshot(ctx context.Context, base, model string) (snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, v.cfg.SnapshotTimeout)
	defer cancel()
	u := strings.TrimRight(base, "/") + "/v1/kv-events/snapshot?model=" + url.QueryEscape(model)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return snapshot{}, fmt.Errorf("snapshot %s: %w", u, err)
	}
	if v.cfg.TokenFile != "" {
		// Reread every time: a rotated secret is picked up without a restart.
		b, err := os.ReadFile(v.cfg.TokenFile)
		if err != nil {
			return snapshot{}, fmt.Errorf("snapshot: token: %w", err)
		}
		if tok := strings.TrimSpace(string(b)); tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	resp, err := v.cfg.Client.Do(req)
	if err != nil {
		return snapshot{}, fmt.Errorf("snapshot %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return snapshot{}, fmt.Errorf("snapshot %s: status %d: %s", u, resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	lr := &limitedReader{r: resp.Body, n: v.cfg.SnapshotMaxBytes}
	s, err := parseSnapshot(lr)
	if err != nil {
		if lr.over {
			err = fmt.Errorf("%w: more than %d bytes", errTooLarge, v.cfg.SnapshotMaxBytes)
		}
		return snapshot{}, fmt.Errorf("snapshot %s: %w", u, err)
	}
	return s, nil
}

// limitedReader is io.LimitReader that remembers it cut the body short,
// so the error says why rather than "unexpected EOF".
type limitedReader struct {
	r    io.Reader
	n    int64
	over bool
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		l.over = true
		return 0, io.EOF
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// parseSnapshot decodes {"seq": n, "hashes": ["<hex>", ...]} token by
// token, keeping 8 bytes per hash rather than the strings, so a snapshot
// of a million chunks costs 8 MB, not the ~70 MB of its text. Unknown
// fields are skipped. The body is untrusted: see FuzzSnapshot.
func parseSnapshot(r io.Reader) (snapshot, error) {
	dec := json.NewDecoder(r)
	s := snapshot{seq: -1}
	if err := delim(dec, '{'); err != nil {
		return snapshot{}, err
	}
	var haveSeq, haveHashes bool
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return snapshot{}, fmt.Errorf("snapshot: %w", err)
		}
		key, _ := t.(string)
		switch key {
		case "seq":
			if err := dec.Decode(&s.seq); err != nil {
				return snapshot{}, fmt.Errorf("snapshot: seq: %w", err)
			}
			if s.seq < -1 {
				return snapshot{}, fmt.Errorf("snapshot: seq %d", s.seq)
			}
			haveSeq = true
		case "hashes":
			if err := delim(dec, '['); err != nil {
				return snapshot{}, fmt.Errorf("snapshot: hashes: %w", err)
			}
			for dec.More() {
				var h string
				if err := dec.Decode(&h); err != nil {
					return snapshot{}, fmt.Errorf("snapshot: hash %d: %w", len(s.keys), err)
				}
				k, err := parseHash(h)
				if err != nil {
					return snapshot{}, fmt.Errorf("snapshot: hash %d: %w", len(s.keys), err)
				}
				s.keys = append(s.keys, k)
			}
			if err := delim(dec, ']'); err != nil {
				return snapshot{}, fmt.Errorf("snapshot: hashes: %w", err)
			}
			haveHashes = true
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return snapshot{}, fmt.Errorf("snapshot: field %q: %w", key, err)
			}
		}
	}
	if err := delim(dec, '}'); err != nil {
		return snapshot{}, err
	}
	if !haveSeq || !haveHashes {
		return snapshot{}, errors.New("snapshot: seq and hashes are required")
	}
	return s, nil
}

func delim(dec *json.Decoder, want json.Delim) error {
	t, err := dec.Token()
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if d, ok := t.(json.Delim); !ok || d != want {
		return fmt.Errorf("snapshot: got %v, want %v", t, want)
	}
	return nil
}

// parseHash reads a chunk hash as the cache server prints it: a big-endian
// number in at most 64 hex digits (it pads to 64). Its key is the low 64
// bits, as keyOf takes them from a 32-byte hash.
func parseHash(h string) (uint64, error) {
	if h == "" || len(h) > 64 {
		return 0, fmt.Errorf("%d hex digits, want 1 to 64", len(h))
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') && (c < 'A' || c > 'F') {
			return 0, fmt.Errorf("not hex: %q", h)
		}
	}
	k, err := strconv.ParseUint(h[max(0, len(h)-16):], 16, 64)
	if err != nil {
		return 0, fmt.Errorf("hash %q: %w", h, err)
	}
	return k, nil
}
