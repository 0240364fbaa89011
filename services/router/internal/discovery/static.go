package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// static is a fixed worker list.
type static struct {
	targets []Target
}

// Static returns a Source that reports the workers at urls once and then
// waits for its context to end. Each URL is a worker's base URL,
// http://host:port or https://host:port (an explicit port is required, a
// trailing slash is allowed, paths, queries and credentials are not).
// Surrounding spaces and blank entries are ignored; an empty list or a
// duplicate is an error. The reported URLs are normalised (lower-case scheme
// and host, no trailing slash) and sorted.
func Static(urls []string) (Source, error) {
	var ts []Target
	seen := make(map[string]bool, len(urls))
	for _, raw := range urls {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		u, err := workerURL(raw)
		if err != nil {
			return nil, err
		}
		if seen[u] {
			return nil, fmt.Errorf("discovery: worker %s listed twice", u)
		}
		seen[u] = true
		ts = append(ts, Target{URL: u})
	}
	if len(ts) == 0 {
		return nil, errors.New("discovery: empty static worker list")
	}
	sortTargets(ts)
	return &static{targets: ts}, nil
}

// ParseList splits a comma-separated flag value such as
// "http://a:8000, http://b:8000," into its trimmed, non-empty items, ready
// for Static.
func ParseList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// Run reports the list once, then blocks until ctx ends and returns nil.
func (s *static) Run(ctx context.Context, update func([]Target)) error {
	update(append([]Target(nil), s.targets...))
	<-ctx.Done()
	return nil
}

// NormalizeURL validates raw as a base URL (http://host:port or
// https://host:port) and returns it as every source reports it.
func NormalizeURL(raw string) (string, error) { return workerURL(raw) }

// workerURL validates raw as a worker base URL and returns it normalised
// to scheme://host:port.
func workerURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if !strings.Contains(raw, "://") || (err == nil && u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("discovery: worker URL %q: want http://host:port or https://host:port", raw)
	}
	if err != nil {
		return "", fmt.Errorf("discovery: worker URL %q: %w", raw, err)
	}
	if u.Opaque != "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return "", fmt.Errorf("discovery: worker URL %q: want only scheme://host:port, without path, query or credentials", raw)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || host == "" {
		return "", fmt.Errorf("discovery: worker URL %q: want host:port", raw)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("discovery: worker URL %q: port %q out of range 1-65535", raw, port)
	}
	return hostURL(u.Scheme, strings.ToLower(host), n), nil
}
