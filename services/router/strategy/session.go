package strategy

import (
	"math"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// SessionConfig parameterises Session. Zero fields take the defaults
// listed with each field.
type SessionConfig struct {
	// Headers are the request headers the proxy reads the session key from,
	// first non-empty wins, before falling back to the body's `user` field
	// (default x-session-id, x-user-id). The strategy itself only sees
	// Request.SessionKey; the list lives here so that one file configures
	// the whole strategy. An empty, non-nil list means body `user` only.
	Headers []string `json:"headers" yaml:"headers"`
	// LoadFactor is the bounded-load factor c >= 1 (default 1.25): an
	// endpoint takes a session request only while its Load() <= c × (mean
	// Load() of the candidates + 1).
	LoadFactor float64 `json:"loadFactor" yaml:"loadFactor"`
}

// DefaultSessionHeaders are the session key headers used when
// SessionConfig.Headers is nil.
var DefaultSessionHeaders = []string{"x-session-id", "x-user-id"}

// KeyHeaders returns the session key headers in force: Headers, or a copy
// of DefaultSessionHeaders when Headers is nil. The proxy should read the
// list through it, so a file's `headers: null` means the defaults here too.
func (c SessionConfig) KeyHeaders() []string {
	if c.Headers == nil {
		return append([]string(nil), DefaultSessionHeaders...)
	}
	return c.Headers
}

func (c SessionConfig) withDefaults() SessionConfig {
	c.Headers = c.KeyHeaders()
	if c.LoadFactor == 0 {
		c.LoadFactor = 1.25
	}
	return c
}

func (c SessionConfig) validate() error {
	if !(c.LoadFactor >= 1) || math.IsInf(c.LoadFactor, 1) {
		return errorf("session.loadFactor must be a finite number >= 1, got %v", c.LoadFactor)
	}
	for i, h := range c.Headers {
		if !validHeaderName(h) {
			return errorf("session.headers[%d]: %q is not a valid header name", i, h)
		}
	}
	return nil
}

// Session keeps a conversation or user on one worker, so its growing
// prompt hits the cache, by rendezvous (highest-random-weight) hashing of
// Request.SessionKey over the endpoint IDs with bounded load (Mirrokni,
// Thorup, Zadimoghaddam, "Consistent Hashing with Bounded Loads", 2018,
// arXiv:1608.01350): the session goes to the highest-ranked endpoint whose
// Load() <= LoadFactor × (mean Load() + 1). So a session moves only when
// its endpoint is over the bound or gone, and adding or removing one of N
// endpoints moves only ~1/N of the sessions. Some endpoint is always within
// the bound, since the least-loaded one is at most the mean.
//
// A request without a session key is routed by the PrefixAware fallback
// (Decision.Strategy is then "prefixaware"). Session requests are recorded
// in the fallback's cache knowledge too, so keyless requests see what they
// put in the workers' caches, and their Decisions report that match.
// Session is safe for concurrent use.
type Session struct {
	cfg      SessionConfig
	fallback *PrefixAware
}

var (
	_ Strategy  = (*Session)(nil)
	_ Forgetter = (*Session)(nil)
	_ Inspector = (*Session)(nil)
)

// NewSession returns a Session strategy; zero fields of cfg take their
// defaults, and a nil fallback is a PrefixAware with Defaults()' settings.
// It does not validate; Config.Validate does.
func NewSession(cfg SessionConfig, fallback *PrefixAware) *Session {
	if fallback == nil {
		d := Defaults()
		fallback = NewPrefixAware(d.PrefixAware, d.LoadGuard)
	}
	return &Session{cfg: cfg.withDefaults(), fallback: fallback}
}

// Name returns "session".
func (*Session) Name() string { return NameSession }

// Headers returns the configured session key headers, in order. The caller
// must not modify the slice.
func (s *Session) Headers() []string { return s.cfg.Headers }

// Pick routes a request with a session key to its highest-ranked endpoint
// within the load bound (ties in weight, practically impossible, go to the
// lower ID) and delegates a request without one to the PrefixAware
// fallback. ErrNoEndpoint when eps is empty.
func (s *Session) Pick(req *Request, eps []Endpoint) (Decision, error) {
	if len(eps) == 0 {
		return Decision{}, ErrNoEndpoint
	}
	if req.SessionKey == "" {
		return s.fallback.Pick(req, eps)
	}
	best := s.owner(xxhash.Sum64String(req.SessionKey), eps)
	return s.fallback.observe(NameSession, req, &eps[best]), nil
}

// SetReplicas passes the replica count to the PrefixAware fallback.
// Session placement itself needs no share: it is stateless rendezvous
// hashing, the same in every replica. But the fallback, which routes the
// requests without a key, learns only from this replica's decisions, as
// PrefixAware does, so relaying replicas must scale it alike.
func (s *Session) SetReplicas(n int) { s.fallback.SetReplicas(n) }

// Forget drops the fallback's knowledge of endpointID; session placement
// itself keeps no per-endpoint state.
func (s *Session) Forget(endpointID string) { s.fallback.Forget(endpointID) }

// CacheKnowledge reports the fallback's cache knowledge.
func (s *Session) CacheKnowledge() map[string]Knowledge { return s.fallback.CacheKnowledge() }

// owner returns the index of key's endpoint: the highest rendezvous weight
// among endpoints within the load bound. eps must not be empty.
func (s *Session) owner(key uint64, eps []Endpoint) int {
	var total float64
	for i := range eps {
		total += eps[i].Load()
	}
	bound := s.cfg.LoadFactor * (total/float64(len(eps)) + 1)
	best := -1
	var bestWeight uint64
	for i := range eps {
		if eps[i].Load() > bound {
			continue
		}
		w := rendezvous(key, eps[i].ID)
		if best < 0 || w > bestWeight || (w == bestWeight && eps[i].ID < eps[best].ID) {
			best, bestWeight = i, w
		}
	}
	if best < 0 { // only with LoadFactor < 1, which validate rejects
		best = 0
		for i := range eps {
			if eps[i].Load() < eps[best].Load() {
				best = i
			}
		}
	}
	return best
}

// validHeaderName reports whether h is an RFC 9110 field name (a token).
func validHeaderName(h string) bool {
	const punct = "!#$%&'*+-.^_`|~"
	if h == "" {
		return false
	}
	for i := 0; i < len(h); i++ {
		b := h[i]
		alnum := 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9'
		if !alnum && strings.IndexByte(punct, b) < 0 {
			return false
		}
	}
	return true
}
