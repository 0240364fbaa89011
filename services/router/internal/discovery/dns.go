package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Defaults for DNSConfig.
const (
	DefaultDNSInterval = 5 * time.Second
	DefaultDNSTimeout  = 2 * time.Second
)

// DNSConfig configures a DNS source.
type DNSConfig struct {
	// Name is the DNS name to resolve, typically a headless Service such as
	// workers.ns.svc.cluster.local (a trailing dot skips the search list).
	// With SRV set it is the full SRV name, e.g.
	// _http._tcp.workers.ns.svc.cluster.local. Required.
	Name string
	// Port is the workers' port for A/AAAA records, 1-65535. Required
	// unless SRV is set (SRV records carry their own ports).
	Port int
	// SRV looks Name up as SRV records and resolves each record's target to
	// its A/AAAA addresses; the target host name becomes Target.Name.
	SRV bool
	// Scheme is the workers' URL scheme, "http" (default) or "https".
	Scheme string
	// Interval is the time between lookups (default DefaultDNSInterval).
	Interval time.Duration
	// Timeout bounds one lookup (default DefaultDNSTimeout, at most
	// Interval).
	Timeout time.Duration
	// Resolver does the lookups (default net.DefaultResolver); tests point
	// one at their own DNS server.
	Resolver *net.Resolver
	// Log receives lookup failures (default slog.Default()).
	Log *slog.Logger
}

// DNS is a Source that resolves a name every interval and reports the
// resulting http://<ip>:<port> targets, sorted, whenever the set changes
// (and after the first lookup that succeeds). A lookup that fails keeps
// the last good set and is logged; an answer that the name does not exist
// or has no records (NXDOMAIN, NODATA) is a successful lookup of the empty
// set, so workers scaled to zero leave rotation. Create it with NewDNS.
type DNS struct {
	cfg DNSConfig
}

var _ Source = (*DNS)(nil)

// NewDNS validates cfg, fills in its defaults and returns the source.
func NewDNS(cfg DNSConfig) (*DNS, error) {
	if strings.TrimSpace(cfg.Name) == "" {
		return nil, errors.New("discovery: DNS name is empty")
	}
	if !cfg.SRV && (cfg.Port < 1 || cfg.Port > 65535) {
		return nil, fmt.Errorf("discovery: DNS port %d out of range 1-65535", cfg.Port)
	}
	switch cfg.Scheme {
	case "":
		cfg.Scheme = "http"
	case "http", "https":
	default:
		return nil, fmt.Errorf("discovery: DNS scheme %q: want http or https", cfg.Scheme)
	}
	if cfg.Interval < 0 || cfg.Timeout < 0 {
		return nil, errors.New("discovery: negative DNS interval or timeout")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultDNSInterval
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultDNSTimeout
	}
	cfg.Timeout = min(cfg.Timeout, cfg.Interval)
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &DNS{cfg: cfg}, nil
}

// Run looks the name up at once and then every interval until ctx ends,
// calling update as described on DNS. It returns nil when ctx ends.
func (d *DNS) Run(ctx context.Context, update func([]Target)) error {
	var filter changeFilter
	failing := false
	tick := time.NewTicker(d.cfg.Interval)
	defer tick.Stop()
	for {
		ts, err := d.lookup(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			d.cfg.Log.Warn("discovery: DNS lookup failed; keeping the last known workers",
				"name", d.cfg.Name, "err", err)
			failing = true
		default:
			if failing {
				d.cfg.Log.Info("discovery: DNS lookup recovered", "name", d.cfg.Name, "workers", len(ts))
				failing = false
			}
			if filter.changed(ts) {
				update(slices.Clone(ts))
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// lookup resolves the name once, within the configured timeout, and
// returns the sorted targets.
func (d *DNS) lookup(ctx context.Context) ([]Target, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	if !d.cfg.SRV {
		addrs, err := d.addrs(ctx, d.cfg.Name)
		if err != nil {
			return nil, err
		}
		ts := make([]Target, 0, len(addrs))
		for _, a := range addrs {
			ts = append(ts, Target{URL: hostURL(d.cfg.Scheme, a.String(), d.cfg.Port)})
		}
		sortTargets(ts)
		return ts, nil
	}
	_, srvs, err := d.cfg.Resolver.LookupSRV(ctx, "", "", d.cfg.Name)
	if isNotFound(err) {
		return []Target{}, nil
	}
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool)
	ts := []Target{}
	for _, srv := range srvs {
		host := strings.TrimSuffix(srv.Target, ".")
		addrs, err := d.addrs(ctx, srv.Target)
		if err != nil {
			return nil, fmt.Errorf("SRV target %s: %w", host, err)
		}
		for _, a := range addrs {
			u := hostURL(d.cfg.Scheme, a.String(), int(srv.Port))
			if !seen[u] {
				seen[u] = true
				ts = append(ts, Target{URL: u, Name: host})
			}
		}
	}
	sortTargets(ts)
	return ts, nil
}

// addrs returns name's A and AAAA addresses, unique; a name
// that does not exist or has no such records has none.
func (d *DNS) addrs(ctx context.Context, name string) ([]netip.Addr, error) {
	ips, err := d.cfg.Resolver.LookupNetIP(ctx, "ip", name)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(ips))
	for _, ip := range ips {
		out = append(out, ip.Unmap().WithZone(""))
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out), nil
}

// isNotFound reports whether err says the name or its records do not
// exist, as opposed to a failed lookup.
func isNotFound(err error) bool {
	var dnsErr *net.DNSError
	return errors.As(err, &dnsErr) && dnsErr.IsNotFound
}
