package kvzmq

import (
	"encoding/json"
	"testing"
)

func TestParseConfig(t *testing.T) {
	withDefaults := func(f func(*Config)) Config {
		c := DefaultConfig()
		f(&c)
		return c
	}
	tests := []struct {
		name    string
		json    string
		want    Config
		wantErr bool
	}{
		{"empty object", `{}`, DefaultConfig(), false},
		{"enabled picks zmq", `{"enable_kv_cache_events": true}`, withDefaults(func(c *Config) {
			c.EnableKVCacheEvents, c.Publisher = true, PublisherZMQ
		}), false},
		{"reference example", `{"enable_kv_cache_events": true, "publisher": "zmq",
			"endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558", "topic": "kv@pod-1@llama"}`,
			withDefaults(func(c *Config) {
				c.EnableKVCacheEvents, c.Publisher = true, PublisherZMQ
				c.ReplayEndpoint, c.Topic = "tcp://*:5558", "kv@pod-1@llama"
			}), false},
		{"all fields", `{"enable_kv_cache_events": false, "publisher": "null", "endpoint": "tcp://10.0.0.1:6000",
			"replay_endpoint": null, "buffer_steps": 5, "hwm": 0, "max_queue_size": 7, "topic": ""}`,
			withDefaults(func(c *Config) {
				c.Endpoint, c.BufferSteps, c.HWM, c.MaxQueueSize = "tcp://10.0.0.1:6000", 5, 0, 7
			}), false},
		{"explicit publisher kept", `{"enable_kv_cache_events": true, "publisher": "null"}`,
			withDefaults(func(c *Config) { c.EnableKVCacheEvents = true }), false},
		{"unknown field", `{"enable_kv_cache_events": true, "port": 1}`, Config{}, true},
		{"unknown publisher", `{"publisher": "nats"}`, Config{}, true},
		{"negative buffer", `{"buffer_steps": -1}`, Config{}, true},
		{"zero queue", `{"max_queue_size": 0}`, Config{}, true},
		{"empty endpoint", `{"endpoint": ""}`, Config{}, true},
		{"trailing data", `{} {}`, Config{}, true},
		{"not json", `enable`, Config{}, true},
		{"wrong type", `{"hwm": "1"}`, Config{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseConfig(tt.json)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("got %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseConfig: %v", err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			// Idempotence: what we write parses back to the same config.
			text, err := json.Marshal(got)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			again, err := ParseConfig(string(text))
			if err != nil || again != got {
				t.Errorf("re-parse of %s: got %+v, %v, want %+v", text, again, err, got)
			}
		})
	}
}

func TestConfigMarshalNulls(t *testing.T) {
	c := DefaultConfig()
	c.Publisher = ""
	text, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"enable_kv_cache_events":false,"publisher":null,"endpoint":"tcp://*:5557","replay_endpoint":null,` +
		`"buffer_steps":10000,"hwm":100000,"max_queue_size":100000,"topic":""}`
	if string(text) != want {
		t.Errorf("got %s, want %s", text, want)
	}
}

func TestShouldBind(t *testing.T) {
	tests := []struct {
		endpoint string
		want     bool
	}{
		{"tcp://*:5557", true},
		{"tcp://[::]:5557", true},
		{"tcp://[::1]:5557", true},
		{"ipc:///tmp/kv.sock", true},
		{"inproc://kv", true},
		{"tcp://127.0.0.1:5557", false},
		{"tcp://router.svc:5557", false},
		{"tcp://0.0.0.0:5557", false}, // as in vLLM: no "*" means connect
	}
	for _, tt := range tests {
		if got := ShouldBind(tt.endpoint); got != tt.want {
			t.Errorf("ShouldBind(%q): got %v, want %v", tt.endpoint, got, tt.want)
		}
	}
}

func TestOffsetEndpointPort(t *testing.T) {
	tests := []struct {
		endpoint string
		rank     int
		want     string
		wantErr  bool
	}{
		{"tcp://*:5557", 0, "tcp://*:5557", false},
		{"tcp://*:5557", 3, "tcp://*:5560", false},
		{"tcp://[::]:5557", 1, "tcp://[::]:5558", false},
		{"inproc://cache", 2, "inproc://cache_dp2", false},
		{"", 2, "", false},
		{"ipc:///tmp/kv", 1, "", true},
		{"tcp://host:port", 1, "", true},
	}
	for _, tt := range tests {
		got, err := OffsetEndpointPort(tt.endpoint, tt.rank)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("OffsetEndpointPort(%q, %d): got %q, %v, want %q (error %v)", tt.endpoint, tt.rank, got, err, tt.want, tt.wantErr)
		}
	}
}
