// Package apikeys holds the API keys the router accepts: one given on the
// command line, and those of a file (one per line; a Kubernetes Secret
// mounted as a volume), reread when it changes so that keys rotate without
// a restart, as the TLS certificate does (libs/filereload for both).
package apikeys

import (
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/warmpath/warmpath/libs/filereload"
)

// Set is the keys in force. Valid is safe for concurrent use.
type Set struct {
	static []byte
	file   *filereload.Value[[][]byte] // nil without a key file
}

// New returns the set of static (if not empty) and the keys of file (if
// named), which is checked for changes at most once per recheck (1s when
// 0). A file must exist and hold a key at start; later, a file that
// cannot be read or holds none keeps the keys in force (logged), so a
// half-done rotation locks no client out.
func New(static, file string, recheck time.Duration, log *slog.Logger) (*Set, error) {
	s := &Set{}
	if static != "" {
		s.static = []byte(static)
	}
	if file != "" {
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		v, err := filereload.New(recheck, log.With("component", "apikeys"), parse, file)
		if err != nil {
			return nil, fmt.Errorf("apikeys: %w", err)
		}
		s.file = v
	}
	return s, nil
}

// parse takes the keys of a key file: its lines, trimmed, but for empty
// ones and comments.
func parse(contents [][]byte) ([][]byte, error) {
	var keys [][]byte
	for line := range bytes.Lines(contents[0]) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' {
			keys = append(keys, line)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("apikeys: the key file holds no key (one per line; # starts a comment)")
	}
	return keys, nil
}

// Enabled says clients must present a key.
func (s *Set) Enabled() bool { return s != nil && (s.static != nil || s.file != nil) }

// Valid says token is one of the keys. Every key is compared, in constant
// time, so the time taken says nothing of which key nearly matched.
func (s *Set) Valid(token []byte) bool {
	ok := 0
	if s.static != nil {
		ok |= subtle.ConstantTimeCompare(token, s.static)
	}
	if s.file != nil {
		for _, k := range s.file.Get() {
			ok |= subtle.ConstantTimeCompare(token, k)
		}
	}
	return ok == 1
}
