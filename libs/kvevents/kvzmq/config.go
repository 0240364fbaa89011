package kvzmq

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Publisher kinds accepted in Config.Publisher.
const (
	PublisherNull = "null"
	PublisherZMQ  = "zmq"
)

// Config mirrors vLLM's KVEventsConfig, the JSON given to --kv-events-config
// (vllm/config/kv_events.py), with the same field names and defaults.
type Config struct {
	// EnableKVCacheEvents turns event publishing on. Default false.
	EnableKVCacheEvents bool `json:"enable_kv_cache_events"`
	// Publisher is "zmq" or "null". When unset it becomes "zmq" if events
	// are enabled and "null" otherwise, as in vLLM.
	Publisher string `json:"publisher"`
	// Endpoint is the PUB address. Default "tcp://*:5557". See ShouldBind.
	Endpoint string `json:"endpoint"`
	// ReplayEndpoint is the ROUTER address the replay socket binds; ""
	// (JSON null, the default) disables replay.
	ReplayEndpoint string `json:"replay_endpoint"`
	// BufferSteps is how many batches the replay buffer keeps. Default 10000.
	BufferSteps int `json:"buffer_steps"`
	// HWM is the PUB high-water mark in messages; beyond it the socket drops
	// silently. 0 means unlimited. Default 100000.
	HWM int `json:"hwm"`
	// MaxQueueSize bounds the batches waiting to be sent. Default 100000.
	MaxQueueSize int `json:"max_queue_size"`
	// Topic is the first frame of every message. Default "".
	Topic string `json:"topic"`
}

// DefaultConfig returns vLLM's defaults (events disabled, publisher "null").
func DefaultConfig() Config {
	return Config{
		Publisher:    PublisherNull,
		Endpoint:     "tcp://*:5557",
		BufferSteps:  10_000,
		HWM:          100_000,
		MaxQueueSize: 100_000,
	}
}

// ParseConfig parses --kv-events-config JSON over DefaultConfig. Unknown
// fields, trailing data, an unknown publisher and negative sizes are errors.
func ParseConfig(jsonText string) (Config, error) {
	c := DefaultConfig()
	c.Publisher = ""
	dec := json.NewDecoder(strings.NewReader(jsonText))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("kvzmq: parse config: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Config{}, errors.New("kvzmq: parse config: data after the JSON object")
	}
	if c.Publisher == "" {
		c.Publisher = PublisherNull
		if c.EnableKVCacheEvents {
			c.Publisher = PublisherZMQ
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Validate reports the first invalid field: an unknown publisher ("" is
// allowed and means unset), an empty
// endpoint, negative buffer_steps or hwm, or max_queue_size below 1 (vLLM
// would queue without bound; this package never does).
func (c Config) Validate() error {
	switch {
	case c.Publisher != "" && c.Publisher != PublisherNull && c.Publisher != PublisherZMQ:
		return fmt.Errorf("kvzmq: config: unknown publisher %q", c.Publisher)
	case c.Endpoint == "":
		return errors.New("kvzmq: config: empty endpoint")
	case c.BufferSteps < 0:
		return fmt.Errorf("kvzmq: config: buffer_steps %d < 0", c.BufferSteps)
	case c.HWM < 0:
		return fmt.Errorf("kvzmq: config: hwm %d < 0", c.HWM)
	case c.MaxQueueSize < 1:
		return fmt.Errorf("kvzmq: config: max_queue_size %d < 1", c.MaxQueueSize)
	}
	return nil
}

// Enabled reports whether vLLM would publish with c: events enabled and the
// "zmq" publisher.
func (c Config) Enabled() bool {
	return c.EnableKVCacheEvents && c.Publisher == PublisherZMQ
}

// MarshalJSON writes c as vLLM reads it, with an empty ReplayEndpoint or
// Publisher as null.
func (c Config) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		EnableKVCacheEvents bool    `json:"enable_kv_cache_events"`
		Publisher           *string `json:"publisher"`
		Endpoint            string  `json:"endpoint"`
		ReplayEndpoint      *string `json:"replay_endpoint"`
		BufferSteps         int     `json:"buffer_steps"`
		HWM                 int     `json:"hwm"`
		MaxQueueSize        int     `json:"max_queue_size"`
		Topic               string  `json:"topic"`
	}{
		c.EnableKVCacheEvents, nonEmpty(c.Publisher), c.Endpoint, nonEmpty(c.ReplayEndpoint),
		c.BufferSteps, c.HWM, c.MaxQueueSize, c.Topic,
	})
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// ShouldBind reports whether vLLM binds (rather than connects) a socket at
// endpoint: when it contains "*" or "::" or uses the ipc:// or inproc://
// transport. Binding is the stable side, connecting the volatile one.
func ShouldBind(endpoint string) bool {
	return strings.Contains(endpoint, "*") || strings.Contains(endpoint, "::") ||
		strings.HasPrefix(endpoint, "ipc://") || strings.HasPrefix(endpoint, "inproc://")
}

// OffsetEndpointPort returns the endpoint vLLM uses for data-parallel rank:
// rank 0 and "" are unchanged, inproc endpoints get the suffix "_dp<rank>",
// tcp endpoints get their port plus rank. Other transports are an error, as
// in vLLM.
func OffsetEndpointPort(endpoint string, rank int) (string, error) {
	if endpoint == "" || rank == 0 {
		return endpoint, nil
	}
	switch {
	case strings.Contains(endpoint, "inproc"):
		return endpoint + "_dp" + strconv.Itoa(rank), nil
	case strings.Contains(endpoint, "tcp"):
		i := strings.LastIndexByte(endpoint, ':')
		if i < 0 {
			return endpoint, nil
		}
		port, err := strconv.Atoi(endpoint[i+1:])
		if err != nil {
			return "", fmt.Errorf("kvzmq: endpoint %q: bad port: %w", endpoint, err)
		}
		return endpoint[:i+1] + strconv.Itoa(port+rank), nil
	}
	return "", fmt.Errorf("kvzmq: endpoint %q: must be inproc or tcp to offset by rank", endpoint)
}
