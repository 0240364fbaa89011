package strategy

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/services/router/kvindex"
)

func TestDefaults(t *testing.T) {
	d := Defaults()
	want := Config{
		Name:        "prefixaware",
		PrefixAware: PrefixAwareConfig{ChunkSize: 128, CharsPerToken: 4, FallbackCapacityTokens: 200000, MaxChunksPerEndpoint: 262144, MaxEndpoints: 1024},
		Session:     SessionConfig{Headers: []string{"x-session-id", "x-user-id"}, LoadFactor: 1.25},
		KVAware:     KVAwareConfig{Timing: "llama-3.1-8b-h100", LoadTokens: 256, QueueWeight: 0.25, PredictionTTLSeconds: 2, DefaultBlockSize: 16, MaxPredictions: 65536, AffinityTokens: 4096, MaxAffinitySlack: 1},
		LoadGuard:   LoadGuardConfig{Window: 1, Ratio: 0.2},
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("Defaults() = %+v, want %+v", d, want)
	}
	if err := d.Validate(); err != nil {
		t.Errorf("Defaults().Validate() = %v, want nil", err)
	}
	d.Session.Headers[0] = "changed"
	if Defaults().Session.Headers[0] != "x-session-id" || DefaultSessionHeaders[0] != "x-session-id" {
		t.Error("Defaults() shares its header slice")
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr string // substring; "" means valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"roundrobin", func(c *Config) { c.Name = "roundrobin" }, ""},
		{"session", func(c *Config) { c.Name = "session" }, ""},
		{"zero parameters take defaults", func(c *Config) { c.PrefixAware, c.Session = PrefixAwareConfig{}, SessionConfig{} }, ""},
		{"zero load guard", func(c *Config) { c.LoadGuard = LoadGuardConfig{} }, ""},
		{"no session headers", func(c *Config) { c.Session.Headers = []string{} }, ""},
		{"unknown strategy", func(c *Config) { c.Name = "random" }, `unknown strategy "random"; valid strategies: roundrobin, session, prefixaware`},
		{"empty strategy", func(c *Config) { c.Name = "" }, `unknown strategy ""`},
		{"kvaware", func(c *Config) { c.Name = "kvaware" }, ""},
		{"kvaware weights out of order", func(c *Config) { c.KVAware.CPUWeight = 1; c.KVAware.GPUWeight = 0.5 }, "gpuWeight >= cpuWeight >= l2Weight"},
		{"kvaware weight above 1", func(c *Config) { c.KVAware.GPUWeight = 2 }, "kvAware.gpuWeight must be between 0 and 1"},
		{"kvaware queue ignored", func(c *Config) { c.KVAware.QueueWeight = -1 }, ""},
		{"kvaware NaN queue weight", func(c *Config) { c.KVAware.QueueWeight = math.NaN() }, "kvAware.queueWeight must be a finite number"},
		{"kvaware unknown timing", func(c *Config) { c.KVAware.Timing = "gpt-5-on-a-toaster" }, "kvAware.timing: timing: unknown preset"},
		{"kvaware infinite affinity tokens", func(c *Config) { c.KVAware.AffinityTokens = math.Inf(1) }, "kvAware.affinityTokens must be a finite number"},
		{"kvaware negative affinity slack", func(c *Config) { c.KVAware.MaxAffinitySlack = -1 }, "maxAffinitySlack a finite number >= 0"},
		{"kvaware affinity off", func(c *Config) { c.KVAware.AffinityTokens = -1 }, ""},
		{"negative chunk size", func(c *Config) { c.PrefixAware.ChunkSize = -1 }, "prefixAware.chunkSize must be a positive"},
		{"NaN chars per token", func(c *Config) { c.PrefixAware.CharsPerToken = math.NaN() }, "prefixAware.charsPerToken"},
		{"negative fallback", func(c *Config) { c.PrefixAware.FallbackCapacityTokens = -5 }, "prefixAware.fallbackCapacityTokens"},
		{"negative max chunks", func(c *Config) { c.PrefixAware.MaxChunksPerEndpoint = -5 }, "prefixAware.maxChunksPerEndpoint"},
		{"negative offload", func(c *Config) { c.PrefixAware.OffloadCapacityTokens = -1 }, "prefixAware.offloadCapacityTokens must not be negative"},
		{"load factor below 1", func(c *Config) { c.Session.LoadFactor = 0.9 }, "session.loadFactor must be a finite number >= 1, got 0.9"},
		{"bad header", func(c *Config) { c.Session.Headers = []string{"x-session-id", "x user"} }, `session.headers[1]: "x user" is not a valid header name`},
		{"empty header", func(c *Config) { c.Session.Headers = []string{""} }, `session.headers[0]`},
		{"negative window", func(c *Config) { c.LoadGuard.Window = -1 }, "loadGuard.window must be a finite number >= 0, got -1"},
		{"infinite ratio", func(c *Config) { c.LoadGuard.Ratio = math.Inf(1) }, "loadGuard.ratio"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Defaults()
			tt.edit(&c)
			err := c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
			s, nerr := New(c, WithIndex(kvindex.New(1024)))
			if (err == nil) != (nerr == nil) {
				t.Errorf("New() error = %v, want the same outcome as Validate() = %v", nerr, err)
			}
			if nerr == nil && s.Name() != c.Name {
				t.Errorf("New().Name() = %q, want %q", s.Name(), c.Name)
			}
		})
	}
}

func TestNewAbilities(t *testing.T) {
	tests := []struct {
		name                 string
		wantForget, wantInsp bool
	}{
		{NameRoundRobin, false, false},
		{NameSession, true, true},
		{NamePrefixAware, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Defaults()
			c.Name = tt.name
			s, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			if _, got := s.(Forgetter); got != tt.wantForget {
				t.Errorf("is Forgetter = %v, want %v", got, tt.wantForget)
			}
			if _, got := s.(Inspector); got != tt.wantInsp {
				t.Errorf("is Inspector = %v, want %v", got, tt.wantInsp)
			}
		})
	}
}

// TestConfigJSON: the file's field names, and that a partial file keeps
// the defaults it does not mention (config.Parse decodes over Defaults()).
func TestConfigJSON(t *testing.T) {
	c := Defaults()
	raw := `{"strategy":"session","prefixAware":{"chunkSize":64},"session":{"headers":["x-conversation"],"loadFactor":1.5},"loadGuard":{"window":4}}`
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		t.Fatal(err)
	}
	want := Defaults()
	want.Name = "session"
	want.PrefixAware.ChunkSize = 64
	want.Session = SessionConfig{Headers: []string{"x-conversation"}, LoadFactor: 1.5}
	want.LoadGuard.Window = 4
	if !reflect.DeepEqual(c, want) {
		t.Errorf("decoded %+v, want %+v", c, want)
	}
	out, err := json.Marshal(Defaults())
	if err != nil {
		t.Fatal(err)
	}
	const wantJSON = `{"strategy":"prefixaware","prefixAware":{"chunkSize":128,"charsPerToken":4,"fallbackCapacityTokens":200000,"maxChunksPerEndpoint":262144,"maxEndpoints":1024},"session":{"headers":["x-session-id","x-user-id"],"loadFactor":1.25},"kvAware":{"timing":"llama-3.1-8b-h100","loadTokens":256,"queueWeight":0.25,"predictionTTLSeconds":2,"defaultBlockSize":16,"maxPredictions":65536,"affinityTokens":4096,"maxAffinitySlack":1},"loadGuard":{"window":1,"ratio":0.2}}`
	if string(out) != wantJSON {
		t.Errorf("json.Marshal(Defaults()) = %s, want %s", out, wantJSON)
	}
}

func TestSessionHeaders(t *testing.T) {
	if got := NewSession(SessionConfig{}, nil).Headers(); !reflect.DeepEqual(got, DefaultSessionHeaders) {
		t.Errorf("Headers() = %v, want %v", got, DefaultSessionHeaders)
	}
	if got := (SessionConfig{}).KeyHeaders(); !reflect.DeepEqual(got, DefaultSessionHeaders) {
		t.Errorf("KeyHeaders() of nil = %v, want %v", got, DefaultSessionHeaders)
	}
	if got := NewSession(SessionConfig{Headers: []string{}}, nil).Headers(); len(got) != 0 {
		t.Errorf("Headers() with an empty list = %v, want none", got)
	}
}
