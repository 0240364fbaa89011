package strategy

import (
	"fmt"
	"strings"
)

// Strategy names, as in Config.Name and Strategy.Name.
const (
	NameRoundRobin  = "roundrobin"
	NameSession     = "session"
	NamePrefixAware = "prefixaware"
	// NameKVAware is exact, token-level cache-aware routing on the KV
	// index the workers' events maintain.
	NameKVAware = "kvaware"
)

// Names lists the strategies New can build.
var Names = []string{NameRoundRobin, NameSession, NamePrefixAware, NameKVAware}

// Config selects a strategy and holds every strategy's parameters, so the
// router's configuration file can switch strategy without losing the
// others' settings. In a file (sigs.k8s.io/yaml, i.e. the json tags):
//
//	strategy: prefixaware          # roundrobin | session | prefixaware | kvaware
//	prefixAware: {chunkSize: 128, charsPerToken: 4, fallbackCapacityTokens: 200000, maxChunksPerEndpoint: 262144, maxEndpoints: 1024}
//	session: {headers: [x-session-id, x-user-id], loadFactor: 1.25}
//	loadGuard: {window: 1, ratio: 0.2}
//
// Start from Defaults(). Zero fields of PrefixAware and Session mean their
// defaults; LoadGuard's zero values are literal (no slack: only the
// least-loaded endpoints are eligible).
type Config struct {
	// Name is the strategy: one of Names (default "prefixaware").
	Name string `json:"strategy" yaml:"strategy"`
	// PrefixAware configures prefixaware, and session's keyless fallback.
	PrefixAware PrefixAwareConfig `json:"prefixAware" yaml:"prefixAware"`
	// Session configures session.
	Session SessionConfig `json:"session" yaml:"session"`
	// KVAware configures kvaware.
	KVAware KVAwareConfig `json:"kvAware" yaml:"kvAware"`
	// LoadGuard bounds the cache-aware strategies' choice by load.
	LoadGuard LoadGuardConfig `json:"loadGuard" yaml:"loadGuard"`
}

// Defaults returns the default configuration: prefixaware; chunks of 128
// bytes, 4 chars per token, 200000 tokens assumed for a worker whose
// capacity is unknown, at most 262144 chunks per worker and 1024 workers'
// chunk tables; session headers x-session-id and x-user-id with load
// factor 1.25; load guard window 1 request, ratio 0.2.
func Defaults() Config {
	return Config{
		Name:        NamePrefixAware,
		PrefixAware: PrefixAwareConfig{}.withDefaults(),
		Session:     SessionConfig{}.withDefaults(),
		KVAware:     KVAwareConfig{}.withDefaults(),
		LoadGuard:   LoadGuardConfig{Window: 1, Ratio: 0.2},
	}
}

// Validate reports the first invalid setting, naming it as in the file.
// Every part is checked, not only the selected strategy's, so a mistake
// does not lurk until the strategy is switched.
func (c Config) Validate() error {
	switch c.Name {
	case NameRoundRobin, NameSession, NamePrefixAware, NameKVAware:
	default:
		return errorf("unknown strategy %q; valid strategies: %s", c.Name, strings.Join(Names, ", "))
	}
	if err := c.PrefixAware.withDefaults().validate(); err != nil {
		return err
	}
	if err := c.Session.withDefaults().validate(); err != nil {
		return err
	}
	if err := c.KVAware.withDefaults().validate(); err != nil {
		return err
	}
	return c.LoadGuard.validate()
}

// Option supplies what a strategy needs beyond its configuration.
type Option func(*deps)

type deps struct {
	index BlockIndex
	notes PrefillObserver
	l2    L2View
	preds *Predictions
}

// WithIndex gives kvaware the KV index the router's event subscriber
// maintains.
func WithIndex(idx BlockIndex) Option { return func(d *deps) { d.index = idx } }

// WithL2 gives kvaware the shared L2's own account of what it holds (the
// cache server's event stream), credited to every worker alike.
func WithL2(v L2View) Option { return func(d *deps) { d.l2 = v } }

// WithPrefillNotes gives kvaware where to pass on the prefills of the
// prompts it routed (kvsub.Manager; the benchmark's fleet), so the index's
// views of tiers that do not report removals (or anything) follow them.
func WithPrefillNotes(n PrefillObserver) Option { return func(d *deps) { d.notes = n } }

// WithPredictions gives kvaware the router's live predictions (which its
// KV subscriber confirms through a ConfirmingSink), so they outlive the
// strategy across configuration reloads; without it kvaware keeps its own.
func WithPredictions(p *Predictions) Option { return func(d *deps) { d.preds = p } }

// New validates cfg and builds the strategy it names, with fresh state.
// The result is safe for concurrent use; prefixaware, session and kvaware
// also implement Forgetter and Inspector. kvaware needs WithIndex.
func New(cfg Config, opts ...Option) (Strategy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var d deps
	for _, o := range opts {
		o(&d)
	}
	switch cfg.Name {
	case NameRoundRobin:
		return NewRoundRobin(), nil
	case NameSession:
		return NewSession(cfg.Session, NewPrefixAware(cfg.PrefixAware, cfg.LoadGuard)), nil
	case NameKVAware:
		if d.index == nil {
			return nil, errorf("strategy kvaware needs the KV event index: start the router with --kv-events-endpoint")
		}
		k := NewKVAware(cfg.KVAware, cfg.LoadGuard, d.index, NewPrefixAware(cfg.PrefixAware, cfg.LoadGuard))
		k.notes, k.l2 = d.notes, d.l2
		if d.preds != nil {
			k.usePredictions(d.preds)
		}
		return k, nil
	default:
		return NewPrefixAware(cfg.PrefixAware, cfg.LoadGuard), nil
	}
}

// errorf formats a configuration error with the package prefix.
func errorf(format string, args ...any) error {
	return fmt.Errorf("strategy: "+format, args...)
}
