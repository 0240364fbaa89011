// Package filereload keeps the parsed content of files that change under a
// running process — a renewed certificate, a rotated Kubernetes Secret
// (whose volume swaps a symlink, so contents are compared, not
// modification times). Get rereads them at most once per interval and
// parses again only when their bytes changed; a reread or a parse that
// fails keeps the last good value, so a half-written rotation takes no
// service down.
package filereload

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"
)

// Value is the parse of a set of files. Get is safe for concurrent use.
type Value[T any] struct {
	paths   []string
	parse   func(contents [][]byte) (T, error)
	recheck time.Duration
	log     *slog.Logger

	mu        sync.Mutex // guards the fields below
	val       T
	contents  [][]byte
	checkedAt time.Time
}

// New reads and parses paths now (an error names the file or the parse at
// fault) and returns the value, rechecked at most once per recheck (1s
// when 0). log receives the failures of later reloads (nil: discarded).
func New[T any](recheck time.Duration, log *slog.Logger, parse func(contents [][]byte) (T, error), paths ...string) (*Value[T], error) {
	if recheck <= 0 {
		recheck = time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	v := &Value[T]{paths: paths, parse: parse, recheck: recheck, log: log}
	if err := v.load(); err != nil {
		return nil, err
	}
	return v, nil
}

// Get returns the value, reloading it first when the interval has passed.
func (v *Value[T]) Get() T {
	v.mu.Lock()
	due := time.Since(v.checkedAt) >= v.recheck
	v.mu.Unlock()
	if due {
		if err := v.load(); err != nil {
			v.log.Warn("keeping the value in force", "files", v.paths, "err", err)
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.val
}

// load rereads the files and parses them if they changed.
func (v *Value[T]) load() error {
	contents := make([][]byte, len(v.paths))
	var err error
	for i, p := range v.paths {
		if contents[i], err = os.ReadFile(p); err != nil {
			break
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.checkedAt = time.Now()
	if err != nil {
		return fmt.Errorf("filereload: %w", err)
	}
	if v.contents != nil && slices.EqualFunc(contents, v.contents, bytes.Equal) {
		return nil
	}
	val, err := v.parse(contents)
	if err != nil {
		return err
	}
	if v.contents != nil {
		v.log.Info("reloaded", "files", v.paths)
	}
	v.val, v.contents = val, contents
	return nil
}
