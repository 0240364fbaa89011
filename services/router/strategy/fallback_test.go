package strategy

import (
	"testing"

	"github.com/warmpath/warmpath/services/router/kvindex"
)

// TestFallbackReasons: a cache-aware decision says when it had nothing to
// route on — no worker holding any of the prompt, or kvaware without token
// ids — and says nothing when some worker held it, even if the load guard
// sent the request elsewhere, or when the prompt is too short to cache.
func TestFallbackReasons(t *testing.T) {
	doc := longText(5, 128*6) // six whole prefixaware chunks
	prompt := tokenIDs(5, 16*8)
	keys := kvindex.AppendKeys(nil, kvindex.Seed("m", ""), prompt, 16)
	tests := []struct {
		name string
		// pick routes one request after any warm-up on a fresh strategy.
		pick func(t *testing.T) Decision
		want string
	}{
		{"prefixaware: nothing cached", func(t *testing.T) Decision {
			return mustPick(t, NewPrefixAware(PrefixAwareConfig{}, LoadGuardConfig{Window: 1}), &Request{Model: "m", Prompt: doc}, eps(0, 0))
		}, FallbackNoPrefixCached},
		{"prefixaware: the prompt cached on the chosen worker", func(t *testing.T) Decision {
			p := NewPrefixAware(PrefixAwareConfig{}, LoadGuardConfig{Window: 1})
			mustPick(t, p, &Request{Model: "m", Prompt: doc}, eps(0, 0))
			return mustPick(t, p, &Request{Model: "m", Prompt: doc}, eps(0, 0))
		}, ""},
		{"prefixaware: the holder is overloaded, the guard goes elsewhere", func(t *testing.T) Decision {
			p := NewPrefixAware(PrefixAwareConfig{}, LoadGuardConfig{})
			e := eps(0, 0)
			first := mustPick(t, p, &Request{Model: "m", Prompt: doc}, e)
			for i := range e {
				if e[i].ID == first.Endpoint {
					e[i].InFlight = 9
				}
			}
			d := mustPick(t, p, &Request{Model: "m", Prompt: doc}, e)
			if d.Endpoint == first.Endpoint || d.MatchedChunks != 0 {
				t.Fatalf("the guard kept the overloaded holder: %+v", d)
			}
			return d
		}, ""},
		{"prefixaware: a prompt shorter than one chunk", func(t *testing.T) Decision {
			return mustPick(t, NewPrefixAware(PrefixAwareConfig{}, LoadGuardConfig{}), &Request{Model: "m", Prompt: "hi"}, eps(0, 0))
		}, ""},
		{"kvaware: no token ids", func(t *testing.T) Decision {
			k := NewKVAware(KVAwareConfig{}, LoadGuardConfig{}, kvindex.New(16), NewPrefixAware(PrefixAwareConfig{}, LoadGuardConfig{}))
			return mustPick(t, k, &Request{Model: "m", Prompt: doc}, kvEPs(0, 0))
		}, FallbackNoTokens},
		{"kvaware: nothing indexed", func(t *testing.T) Decision {
			k := NewKVAware(KVAwareConfig{}, LoadGuardConfig{}, kvindex.New(1<<10), NewPrefixAware(PrefixAwareConfig{}, LoadGuardConfig{}))
			return mustPick(t, k, &Request{Model: "m", TokenIDs: prompt}, kvEPs(0, 0))
		}, FallbackNoPrefixCached},
		{"kvaware: a worker holds the prefix", func(t *testing.T) Decision {
			x := kvindex.New(1 << 10)
			e := kvEPs(0, 0)
			x.Add(e[1].ID, kvindex.CPU, keys[:3])
			k := NewKVAware(KVAwareConfig{}, LoadGuardConfig{}, x, NewPrefixAware(PrefixAwareConfig{}, LoadGuardConfig{}))
			return mustPick(t, k, &Request{Model: "m", TokenIDs: prompt}, e)
		}, ""},
		{"roundrobin never falls back", func(t *testing.T) Decision {
			return mustPick(t, NewRoundRobin(), &Request{Model: "m", Prompt: doc}, eps(0, 0))
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := tt.pick(t); d.Fallback != tt.want {
				t.Fatalf("fallback %q, want %q (%+v)", d.Fallback, tt.want, d)
			}
		})
	}
}

func mustPick(t *testing.T, s Strategy, req *Request, e []Endpoint) Decision {
	t.Helper()
	d, err := s.Pick(req, e)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
