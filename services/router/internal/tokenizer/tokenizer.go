// Package tokenizer turns a request's prompt or chat messages into token
// ids for kvaware: in-process for the models configured with their
// vocabulary (and chat template), else by asking a worker's POST
// /tokenize — so a chat template is applied exactly as the worker applies
// it — with an LRU cache of recent answers (and of conversation prefixes)
// and a timeout. Callers route without tokens when it fails; it never
// fails a request.
package tokenizer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/warmpath/warmpath/libs/openai"
	"github.com/warmpath/warmpath/services/router/strategy"
)

// Config tunes a Client.
type Config struct {
	// Timeout bounds one /tokenize call (500ms): a slow tokenizer must not
	// cost more than the cache it helps find.
	Timeout time.Duration
	// CacheEntries bounds the cache of token ids by request text (4096).
	CacheEntries int
	// CacheBytes bounds the same cache by memory (64 MiB): each entry is
	// charged its token ids (4 bytes each) plus about 160 bytes of key and
	// bookkeeping, and the least recently used go first. An answer larger
	// than the whole budget is not cached.
	CacheBytes int64
	// MaxResponseBytes bounds a /tokenize answer (16 MiB).
	MaxResponseBytes int64
	// Local, when set, tokenizes completion prompts of its models
	// in-process instead of asking a worker, and their chats too where it
	// knows the chat template.
	Local *Local
}

// Client tokenizes through workers.
type Client struct {
	cfg   Config
	http  *http.Client
	cache *cache
	// cutGrid spaces the completion prefixes kept for reuse
	// (defaultCutGrid; tests make it small).
	cutGrid int
}

// DefaultCacheBytes is Config.CacheBytes' default.
const DefaultCacheBytes = 64 << 20

// New returns a client.
func New(cfg Config) (*Client, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 500 * time.Millisecond
	}
	if cfg.CacheEntries <= 0 {
		cfg.CacheEntries = 4096
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = 16 << 20
	}
	if cfg.CacheBytes <= 0 {
		cfg.CacheBytes = DefaultCacheBytes
	}
	c, err := newCache(cfg.CacheEntries, cfg.CacheBytes)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: cache: %w", err)
	}
	return &Client{cfg: cfg, cache: c, cutGrid: defaultCutGrid, http: &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 32, IdleConnTimeout: 4 * time.Second, DisableCompression: true,
	}}}, nil
}

// Result is a tokenization.
type Result struct {
	// IDs are the token ids. The slice is shared: do not modify it.
	IDs []uint32
	// Cached reports an answer from the cache.
	Cached bool
	// LocalChat reports a chat tokenized in-process.
	LocalChat bool
	// ReusedTokens counts the ids taken from a cached prefix: an earlier
	// turn's (LocalChat) or an earlier completion prompt's.
	ReusedTokens int
	// LocalErr is why an in-process chat tokenization failed; the worker
	// was asked instead.
	LocalErr error
}

// Tokenize returns the token ids of req's prompt (or chat messages, with
// the generation prompt) as the worker at workerURL computes them: from
// the cache, in-process for the models Config.Local covers, else from the
// worker's /tokenize.
func (c *Client) Tokenize(ctx context.Context, workerURL string, req *strategy.Request) (Result, error) {
	return c.tokenize(ctx, workerURL, req, false)
}

// tokenize is Tokenize; background says no request waits for the answer
// (a head-routed prompt's whole), so a long completion is encoded on one
// core.
func (c *Client) tokenize(ctx context.Context, workerURL string, req *strategy.Request, background bool) (Result, error) {
	key := cacheKey(req)
	if ids, ok := c.cache.get(key); ok {
		return Result{IDs: ids, Cached: true}, nil
	}
	var res Result
	if m := c.cfg.Local.model(req.Model); m != nil {
		switch {
		case req.Messages == nil:
			ids, reused, err := c.tokenizeCompletion(m, req, background)
			if err != nil {
				return res, err
			}
			if ids == nil {
				ids = []uint32{}
			}
			c.cache.add(key, ids)
			return Result{IDs: ids, ReusedTokens: reused}, nil
		case m.chat != nil:
			ids, reused, err := c.tokenizeChat(m, req)
			if err == nil {
				c.cache.add(key, ids)
				return Result{IDs: ids, LocalChat: true, ReusedTokens: reused}, nil
			}
			res.LocalErr = err // the worker renders its own template
		}
	}
	ids, err := c.remote(ctx, workerURL, req)
	if err != nil {
		return res, err
	}
	c.cache.add(key, ids)
	res.IDs = ids
	return res, nil
}

// remote asks the worker's /tokenize.
func (c *Client) remote(ctx context.Context, workerURL string, req *strategy.Request) ([]uint32, error) {
	body := openai.TokenizeRequest{Model: req.Model}
	if req.Messages != nil {
		for _, m := range req.Messages {
			body.Messages = append(body.Messages, openai.ChatMessage{Role: m.Role, Content: openai.Content(m.Content)})
		}
	} else {
		p := req.Prompt
		body.Prompt = &p
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: encode: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, workerURL+"/tokenize", bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", workerURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, fmt.Errorf("tokenizer: %s: status %d", workerURL, resp.StatusCode)
	}
	var out openai.TokenizeResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, c.cfg.MaxResponseBytes)).Decode(&out); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: decode: %w", workerURL, err)
	}
	if out.Tokens == nil {
		return nil, errors.New("tokenizer: answer without tokens")
	}
	// The decoder grows the slice by doubling: up to half of it would be
	// held (and charged) for nothing.
	ids := out.Tokens
	if cap(ids)-len(ids) > len(ids)/8 {
		ids = slices.Clone(ids)
	}
	return ids, nil
}

// cacheKey hashes what tokenization depends on. A hash, not the text: the
// request's strings live in buffers the server reuses.
func cacheKey(req *strategy.Request) uint64 {
	d := xxhash.New()
	_, _ = d.WriteString(req.Model)
	if req.Messages != nil {
		_, _ = d.WriteString("\x00chat")
		for _, m := range req.Messages {
			_, _ = d.WriteString("\x00" + m.Role + "\x00")
			_, _ = d.WriteString(m.Content)
		}
	} else {
		_, _ = d.WriteString("\x00prompt\x00")
		_, _ = d.WriteString(req.Prompt)
	}
	return d.Sum64()
}
