// Package config loads the router's hot-reloadable routing configuration
// (strategy, its parameters, request limits) from a YAML or JSON file and
// watches it for changes, including Kubernetes ConfigMap updates, which
// swap a symlinked directory rather than writing the file.
package config

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"sigs.k8s.io/yaml"

	"github.com/warmpath/warmpath/services/router/internal/limiter"
	"github.com/warmpath/warmpath/services/router/strategy"
)

// File is the routing configuration file. Its strategy fields sit at the
// top level:
//
//	strategy: prefixaware
//	prefixAware: {...}
//	session: {...}
//	loadGuard: {...}
//	requestLimits:
//	  maxConcurrentRequests: 256
//	  maxQueueSize: 512
//	  overflowStatusCode: 429
//	  queueTimeout: 30s
type File struct {
	strategy.Config
	RequestLimits *Limits `json:"requestLimits,omitempty"`
}

// Limits mirrors the managed anchor's requestLimits.
type Limits struct {
	MaxConcurrentRequests int    `json:"maxConcurrentRequests"`
	MaxQueueSize          int    `json:"maxQueueSize"`
	OverflowStatusCode    int    `json:"overflowStatusCode,omitempty"`
	QueueTimeout          string `json:"queueTimeout,omitempty"`
}

// Limiter converts the limits to the limiter's form.
func (l Limits) Limiter() (limiter.Config, error) {
	c := limiter.Config{MaxConcurrent: l.MaxConcurrentRequests, MaxQueue: l.MaxQueueSize, OverflowStatus: l.OverflowStatusCode}
	switch {
	case l.MaxConcurrentRequests < 0 || l.MaxQueueSize < 0:
		return c, errors.New("requestLimits: maxConcurrentRequests and maxQueueSize must be non-negative")
	case l.OverflowStatusCode != 0 && l.OverflowStatusCode != 429 && l.OverflowStatusCode != 503:
		return c, fmt.Errorf("requestLimits: overflowStatusCode must be 429 or 503, got %d", l.OverflowStatusCode)
	}
	if l.QueueTimeout != "" {
		d, err := time.ParseDuration(l.QueueTimeout)
		if err != nil || d <= 0 {
			return c, fmt.Errorf("requestLimits: queueTimeout %q: want a positive duration like 30s", l.QueueTimeout)
		}
		c.QueueTimeout = d
	}
	return c, nil
}

// MaxFileBytes bounds the configuration file.
const MaxFileBytes = 1 << 20

// Load reads, defaults and validates a configuration file. Unknown fields
// are errors, so a typo never silently falls back to a default.
func Load(path string) (File, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return File{}, fmt.Errorf("config: %w", err)
	}
	if len(raw) > MaxFileBytes {
		return File{}, fmt.Errorf("config: %s is larger than %d bytes", path, MaxFileBytes)
	}
	return Parse(raw)
}

// Parse decodes YAML or JSON configuration.
func Parse(raw []byte) (File, error) {
	f := File{Config: strategy.Defaults()}
	if err := yaml.UnmarshalStrict(raw, &f); err != nil {
		return File{}, fmt.Errorf("config: %w", err)
	}
	if err := f.Validate(); err != nil {
		return File{}, fmt.Errorf("config: %w", err)
	}
	if f.RequestLimits != nil {
		if _, err := f.RequestLimits.Limiter(); err != nil {
			return File{}, fmt.Errorf("config: %w", err)
		}
	}
	return f, nil
}

// watching, when a test sets it, is called once Watch watches the directory:
// a change made after that is seen.
var watching func()

// Watch calls onChange whenever path may have changed, until ctx ends. It
// watches the parent directory, so editors' rename-into-place and the
// ConfigMap "..data" symlink swap are both seen; bursts are debounced.
func Watch(ctx context.Context, path string, log *slog.Logger, onChange func()) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("config: watch: %w", err)
	}
	defer w.Close()
	dir := filepath.Dir(path)
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("config: watch %s: %w", dir, err)
	}
	if watching != nil {
		watching()
	}
	const debounce = 100 * time.Millisecond
	var timer *time.Timer
	fire := make(chan struct{}, 1)
	for {
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			if timer == nil {
				timer = time.AfterFunc(debounce, func() {
					select {
					case fire <- struct{}{}:
					default:
					}
				})
			} else {
				timer.Reset(debounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			log.Warn("config watch error", "err", err)
		case <-fire:
			onChange()
		}
	}
}
