package discovery

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// zone is a real DNS server on 127.0.0.1 (UDP) answering from records the
// test changes while a source polls it.
type zone struct {
	srv  *dns.Server
	addr string

	mu      sync.Mutex
	records []dns.RR // guarded by mu
	rcode   int      // when not success, every query gets it; guarded by mu
	silent  bool     // when true, queries get no answer at all; guarded by mu
	queries int      // queries seen; guarded by mu
}

// startZone serves an empty zone until the test ends.
func startZone(t *testing.T) *zone {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	z := &zone{addr: pc.LocalAddr().String()}
	started := make(chan struct{})
	z.srv = &dns.Server{PacketConn: pc, Handler: z, NotifyStartedFunc: func() { close(started) }}
	served := make(chan error, 1)
	go func() { served <- z.srv.ActivateAndServe() }()
	select {
	case <-started:
	case err := <-served:
		t.Fatalf("DNS server: %v", err)
	}
	t.Cleanup(func() {
		if err := z.srv.Shutdown(); err != nil {
			t.Errorf("DNS server shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("DNS server: %v", err)
		}
	})
	return z
}

// set replaces the zone's records, given in zone-file syntax.
func (z *zone) set(t *testing.T, rrs ...string) {
	t.Helper()
	parsed := make([]dns.RR, 0, len(rrs))
	for _, s := range rrs {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatalf("record %q: %v", s, err)
		}
		parsed = append(parsed, rr)
	}
	z.mu.Lock()
	z.records, z.rcode, z.silent = parsed, dns.RcodeSuccess, false
	z.mu.Unlock()
}

// fail makes every later query get rcode, or no answer when rcode < 0.
func (z *zone) fail(rcode int) {
	z.mu.Lock()
	z.rcode, z.silent = rcode, rcode < 0
	z.mu.Unlock()
}

func (z *zone) queryCount() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.queries
}

// ServeDNS answers NXDOMAIN for names without records, NOERROR with the
// matching records (possibly none: NODATA) otherwise.
func (z *zone) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.queries++
	if z.silent || len(req.Question) != 1 {
		return
	}
	q := req.Question[0]
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative, m.RecursionAvailable = true, true
	if z.rcode != dns.RcodeSuccess {
		m.Rcode = z.rcode
		_ = w.WriteMsg(m)
		return
	}
	exists := false
	for _, rr := range z.records {
		h := rr.Header()
		if !strings.EqualFold(h.Name, q.Name) {
			continue
		}
		exists = true
		if h.Rrtype == q.Qtype {
			m.Answer = append(m.Answer, dns.Copy(rr))
		}
	}
	if !exists {
		m.Rcode = dns.RcodeNameError
	}
	_ = w.WriteMsg(m)
}

// resolver sends every query to z.
func (z *zone) resolver() *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", z.addr)
		},
	}
}

// recorder collects the sets a source reports.
type recorder struct {
	mu   sync.Mutex
	sets [][]Target // guarded by mu
	wake chan struct{}
}

func newRecorder() *recorder { return &recorder{wake: make(chan struct{}, 1)} }

func (r *recorder) update(ts []Target) {
	r.mu.Lock()
	r.sets = append(r.sets, ts)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// latest returns the number of sets reported and the last one.
func (r *recorder) latest() (int, []Target) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sets) == 0 {
		return 0, nil
	}
	return len(r.sets), r.sets[len(r.sets)-1]
}

// waitFor waits until the last reported set is want and returns it.
func (r *recorder) waitFor(t *testing.T, want []Target, timeout time.Duration) []Target {
	t.Helper()
	deadline := time.After(timeout)
	for {
		n, got := r.latest()
		if n > 0 && slices.Equal(got, want) {
			return got
		}
		select {
		case <-r.wake:
		case <-deadline:
			t.Fatalf("after %v: got %v (%d updates), want %v", timeout, got, n, want)
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for a logger and a test to share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runSource runs src until the test ends and fails the test if Run
// returns an error.
func runSource(t *testing.T, src Source, rec *recorder) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, rec.update) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: got %v, want nil", err)
		}
	})
}

// targets builds Targets from "url" or "url name" strings.
func targets(s ...string) []Target {
	out := []Target{}
	for _, x := range s {
		u, name, _ := strings.Cut(x, " ")
		out = append(out, Target{URL: u, Name: name})
	}
	return out
}

func TestDNSAddresses(t *testing.T) {
	z := startZone(t)
	logs := &lockedBuffer{}
	src, err := NewDNS(DNSConfig{
		Name: "workers.warmpath.test.", Port: 8000,
		Interval: 20 * time.Millisecond, Timeout: 20 * time.Millisecond,
		Resolver: z.resolver(), Log: slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	const name = "workers.warmpath.test. 1 IN "
	steps := []struct {
		name    string
		change  func()
		want    []Target // the set to be reported
		keep    bool     // instead: no set reported over several lookups
		wantLog string   // and this is logged
	}{
		{
			name:   "first lookup",
			change: func() { z.set(t, name+"A 10.0.0.2", name+"A 10.0.0.10") },
			want:   targets("http://10.0.0.10:8000", "http://10.0.0.2:8000"),
		},
		{
			name:   "AAAA added",
			change: func() { z.set(t, name+"A 10.0.0.2", name+"A 10.0.0.10", name+"AAAA fd00::1") },
			want:   targets("http://10.0.0.10:8000", "http://10.0.0.2:8000", "http://[fd00::1]:8000"),
		},
		{
			name:   "A removed",
			change: func() { z.set(t, name+"A 10.0.0.10", name+"AAAA fd00::1") },
			want:   targets("http://10.0.0.10:8000", "http://[fd00::1]:8000"),
		},
		{
			name:   "same answer in another order reports nothing",
			change: func() { z.set(t, name+"AAAA fd00::1", name+"A 10.0.0.10", name+"A 10.0.0.10") },
			keep:   true,
		},
		{
			name:    "SERVFAIL keeps the last set",
			change:  func() { z.fail(dns.RcodeServerFailure) },
			keep:    true,
			wantLog: "DNS lookup failed",
		},
		{
			name:    "timeout keeps the last set",
			change:  func() { z.fail(-1) },
			keep:    true,
			wantLog: "DNS lookup failed",
		},
		{
			name:    "recovery reports the new set",
			change:  func() { z.set(t, name+"A 10.0.0.3") },
			want:    targets("http://10.0.0.3:8000"),
			wantLog: "DNS lookup recovered",
		},
		{
			name:   "NXDOMAIN empties the set",
			change: func() { z.set(t, "other.warmpath.test. 1 IN A 10.0.0.9") },
			want:   targets(),
		},
		{
			name:   "back again",
			change: func() { z.set(t, name+"A 10.0.0.4") },
			want:   targets("http://10.0.0.4:8000"),
		},
		{
			name:   "no address records (NODATA) empties the set",
			change: func() { z.set(t, name+`TXT "no workers"`) },
			want:   targets(),
		},
	}
	rec := newRecorder()
	steps[0].change()
	runSource(t, src, rec)
	for i, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			n0, _ := rec.latest()
			q0 := z.queryCount()
			if i > 0 {
				st.change()
			}
			if !st.keep {
				rec.waitFor(t, st.want, 5*time.Second)
			} else {
				// Several lookups (an A and an AAAA query each) must
				// pass without a report.
				deadline := time.Now().Add(5 * time.Second)
				for z.queryCount() < q0+8 && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				if got := z.queryCount() - q0; got < 8 {
					t.Fatalf("got %d queries, want at least 8", got)
				}
				if n, got := rec.latest(); n != n0 {
					t.Errorf("got %d new reports (last %v), want none", n-n0, got)
				}
			}
			if st.wantLog != "" && !strings.Contains(logs.String(), st.wantLog) {
				t.Errorf("got logs %q, want them to contain %q", logs.String(), st.wantLog)
			}
		})
	}
}

func TestDNSSRV(t *testing.T) {
	z := startZone(t)
	src, err := NewDNS(DNSConfig{
		Name: "_http._tcp.workers.warmpath.test.", SRV: true,
		Interval: 20 * time.Millisecond, Resolver: z.resolver(),
		Log: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	const srv = "_http._tcp.workers.warmpath.test. 1 IN SRV 0 0 "
	hosts := []string{
		"w1.warmpath.test. 1 IN A 10.0.0.1",
		"w2.warmpath.test. 1 IN A 10.0.0.2",
		"w2.warmpath.test. 1 IN AAAA fd00::2",
	}
	steps := []struct {
		name string
		rrs  []string
		want []Target
	}{
		{
			name: "two targets",
			rrs:  append([]string{srv + "8001 w1.warmpath.test.", srv + "8002 w2.warmpath.test."}, hosts...),
			want: targets("http://10.0.0.1:8001 w1.warmpath.test", "http://10.0.0.2:8002 w2.warmpath.test",
				"http://[fd00::2]:8002 w2.warmpath.test"),
		},
		{
			name: "target without addresses contributes nothing",
			rrs:  append([]string{srv + "8001 w1.warmpath.test.", srv + "8003 gone.warmpath.test."}, hosts...),
			want: targets("http://10.0.0.1:8001 w1.warmpath.test"),
		},
		{
			name: "target added",
			rrs:  append([]string{srv + "8001 w1.warmpath.test.", srv + "8002 w2.warmpath.test."}, hosts...),
			want: targets("http://10.0.0.1:8001 w1.warmpath.test", "http://10.0.0.2:8002 w2.warmpath.test",
				"http://[fd00::2]:8002 w2.warmpath.test"),
		},
		{
			name: "target removed",
			rrs:  append([]string{srv + "8001 w1.warmpath.test."}, hosts...),
			want: targets("http://10.0.0.1:8001 w1.warmpath.test"),
		},
		{
			name: "port changed",
			rrs:  append([]string{srv + "9001 w1.warmpath.test."}, hosts...),
			want: targets("http://10.0.0.1:9001 w1.warmpath.test"),
		},
		{
			name: "NXDOMAIN empties the set",
			rrs:  hosts,
			want: targets(),
		},
	}
	rec := newRecorder()
	z.set(t, steps[0].rrs...)
	runSource(t, src, rec)
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			z.set(t, st.rrs...)
			rec.waitFor(t, st.want, 5*time.Second)
		})
	}
}

func TestNewDNS(t *testing.T) {
	tests := []struct {
		name    string
		cfg     DNSConfig
		wantErr string
		want    DNSConfig // defaults filled in (Resolver and Log not compared)
	}{
		{
			name: "defaults",
			cfg:  DNSConfig{Name: "w", Port: 8000},
			want: DNSConfig{Name: "w", Port: 8000, Scheme: "http", Interval: DefaultDNSInterval, Timeout: DefaultDNSTimeout},
		},
		{
			name: "timeout capped at the interval",
			cfg:  DNSConfig{Name: "w", Port: 8000, Scheme: "https", Interval: time.Second, Timeout: time.Minute},
			want: DNSConfig{Name: "w", Port: 8000, Scheme: "https", Interval: time.Second, Timeout: time.Second},
		},
		{
			name: "SRV needs no port",
			cfg:  DNSConfig{Name: "_http._tcp.w", SRV: true},
			want: DNSConfig{Name: "_http._tcp.w", SRV: true, Scheme: "http", Interval: DefaultDNSInterval, Timeout: DefaultDNSTimeout},
		},
		{name: "no name", cfg: DNSConfig{Port: 8000}, wantErr: "name is empty"},
		{name: "no port", cfg: DNSConfig{Name: "w"}, wantErr: "out of range"},
		{name: "port too big", cfg: DNSConfig{Name: "w", Port: 70000}, wantErr: "out of range"},
		{name: "bad scheme", cfg: DNSConfig{Name: "w", Port: 1, Scheme: "ftp"}, wantErr: "want http or https"},
		{name: "negative interval", cfg: DNSConfig{Name: "w", Port: 1, Interval: -1}, wantErr: "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := NewDNS(tt.cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got err %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.cfg.Resolver == nil || d.cfg.Log == nil {
				t.Errorf("got Resolver %v, Log %v, want both set", d.cfg.Resolver, d.cfg.Log)
			}
			got := d.cfg
			got.Resolver, got.Log = nil, nil
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
