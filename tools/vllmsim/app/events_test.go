package app

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/warmpath/warmpath/libs/blockhash"
	"github.com/warmpath/warmpath/libs/kvevents"
	"github.com/warmpath/warmpath/libs/kvevents/kvzmq"
	"github.com/warmpath/warmpath/libs/testwait"
	"github.com/warmpath/warmpath/tools/vllmsim/engine"
	"github.com/warmpath/warmpath/tools/vllmsim/kvpublish"
	"github.com/warmpath/warmpath/tools/vllmsim/lmcache"
)

// TestKVEventsDescribeCache subscribes to the simulator's KV events with an
// independent ZMQ SUB socket (the topology where the subscriber binds and
// workers dial in), decodes them with libs/kvevents, and checks that they
// describe exactly the blocks the engine and LMCache L1 hold: every stored
// hash is the chained hash of the token ids sent with it, and replaying all
// events leaves the same set the GPU cache holds — and, per LMCache event
// mode, the same set the L1 holds (full), a superset announcing every
// resident chunk and no removal (store-only), or nothing (none).
func TestKVEventsDescribeCache(t *testing.T) {
	for _, tc := range []struct {
		name      string
		enc       kvevents.Encoding
		intHashes bool
		mode      lmcache.EventMode
	}{
		{"map encoding, int hashes, full", kvevents.MapEncoding, true, lmcache.EventsFull},
		{"positional encoding, bytes hashes, full", kvevents.Positional, false, lmcache.EventsFull},
		{"map encoding, int hashes, store-only", kvevents.MapEncoding, true, lmcache.EventsStoreOnly},
		{"map encoding, int hashes, none", kvevents.MapEncoding, true, lmcache.EventsNone},
	} {
		t.Run(tc.name, func(t *testing.T) { testKVEvents(t, tc.enc, tc.intHashes, tc.mode) })
	}
}

func testKVEvents(t *testing.T, enc kvevents.Encoding, intHashes bool, mode lmcache.EventMode) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	topic := "kv@sim-0@" + modelName
	s := startSim(t, func(o *Options) {
		o.NumGPUBlocksOverride = 64 // 1024 tokens: forces GPU evictions
		o.MaxModelLen = 1024
		o.KVEventsEncoding = enc
		o.KVEventsIntHashes = intHashes
		o.KVEventsConfig = fmt.Sprintf(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://%s","replay_endpoint":"tcp://127.0.0.1:0","topic":%q}`,
			sub.Addr(), topic)
		o.KVTransferConfig = `{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}`
		o.LMCache.ChunkSize = 64
		o.LMCache.Events = mode
		o.LMCache.MaxLocalCPUSizeGB = float64(6*64*128<<10) / 1e9 // 6 chunks: forces L1 evictions
	})

	// A shared system prompt with distinct questions, repeats and long
	// one-offs: hits, duplicates and evictions in both tiers.
	system := longPrompt("system", 200)
	prompts := []string{system + " Q1", system + " Q2", longPrompt("one-off-a", 600), system + " Q1",
		longPrompt("one-off-b", 700), system + " Q3", longPrompt("one-off-a", 600)}
	for i, p := range prompts {
		code, body := postJSON(t, s.base+"/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":20}`, p))
		if code != 200 {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
	}

	// Wait until the publisher has sent every batch it numbered.
	testwait.For(t, 10*time.Second, "the publisher to send every batch", func() bool {
		numbered := s.metric(t, "warmpath_vllmsim_kv_event_batches_total")
		return numbered > 0 && numbered == s.metric(t, "warmpath_vllmsim_kv_event_batches_published_total")+
			s.metric(t, "warmpath_vllmsim_kv_event_batches_dropped_total")
	})
	if dropped := s.metric(t, "warmpath_vllmsim_kv_event_batches_dropped_total"); dropped != 0 {
		t.Fatalf("publisher dropped %v batches", dropped)
	}
	published := int(s.metric(t, "warmpath_vllmsim_kv_event_batches_published_total"))
	msgs := map[uint64]kvevents.Message{}
	for len(msgs) < published {
		recvCtx, recvCancel := context.WithTimeout(ctx, time.Second)
		got := make(chan zmq4.Msg, 1)
		errc := make(chan error, 1)
		go func() {
			m, err := sub.Recv()
			if err != nil {
				errc <- err
				return
			}
			got <- m
		}()
		select {
		case m := <-got:
			recvCancel()
			msg, err := kvevents.ParseMessage(m.Frames)
			if err != nil {
				t.Fatal(err)
			}
			if msg.Topic != topic {
				t.Fatalf("topic %q, want %q", msg.Topic, topic)
			}
			msgs[msg.Seq] = msg
		case err := <-errc:
			recvCancel()
			t.Fatal(err)
		case <-recvCtx.Done():
			recvCancel()
			// The PUB side may have sent before it finished dialling (ZMQ's
			// slow joiner); what the SUB missed comes back through replay.
			replayed, err := kvzmq.Replay(ctx, "tcp://"+s.app.KVEventsReplayAddr().String(), 0)
			if err != nil {
				t.Fatalf("replay: %v", err)
			}
			for _, m := range replayed {
				msgs[m.Seq] = m
			}
			if len(msgs) < published {
				t.Fatalf("have %d of %d batches after replay", len(msgs), published)
			}
		}
	}

	hasher, err := blockhash.New("0")
	if err != nil {
		t.Fatal(err)
	}
	full := map[kvevents.BlockHash]blockhash.Hash{} // wire hash → full digest, learnt from stored events
	live := map[string]map[kvevents.BlockHash]int{"GPU": {}, "CPU": {}}
	announced := map[kvevents.BlockHash]bool{} // CPU chunks ever stored
	cpuRemovals := 0
	for seq := range uint64(len(msgs)) {
		m, ok := msgs[seq]
		if !ok {
			t.Fatalf("sequence gap: no batch %d", seq)
		}
		b, err := kvevents.DecodeBatch(m.Payload)
		if err != nil {
			t.Fatalf("batch %d: %v", seq, err)
		}
		for _, ev := range b.Events {
			switch ev := ev.(type) {
			case kvevents.BlockStored:
				parent := hasher.None()
				if ev.ParentBlockHash != nil {
					p, ok := full[*ev.ParentBlockHash]
					if !ok {
						t.Fatalf("batch %d: parent %v never stored", seq, ev.ParentBlockHash)
					}
					parent = p
				}
				if len(ev.TokenIDs) != len(ev.BlockHashes)*ev.BlockSize {
					t.Fatalf("batch %d: %d tokens for %d blocks of %d", seq, len(ev.TokenIDs), len(ev.BlockHashes), ev.BlockSize)
				}
				for i, wh := range ev.BlockHashes {
					h := hasher.Block(parent, ev.TokenIDs[i*ev.BlockSize:(i+1)*ev.BlockSize], nil)
					if got := kvpublish.WireHash(h, intHashes); got != wh {
						t.Fatalf("batch %d: block %d hash %v is not the chained hash of its tokens (%v)", seq, i, wh, got)
					}
					if wh.IsInt() != intHashes {
						t.Fatalf("hash form int=%v, want %v", wh.IsInt(), intHashes)
					}
					full[wh] = h
					live[ev.Medium][wh]++
					if ev.Medium == "CPU" {
						announced[wh] = true
					}
					parent = h
				}
			case kvevents.BlockRemoved:
				if ev.Medium == "CPU" {
					cpuRemovals++
				}
				for _, wh := range ev.BlockHashes {
					if live[ev.Medium][wh] == 0 {
						t.Fatalf("batch %d: %s removal of %v never stored", seq, ev.Medium, wh)
					}
					live[ev.Medium][wh]--
					if live[ev.Medium][wh] == 0 {
						delete(live[ev.Medium], wh)
					}
				}
			case kvevents.AllBlocksCleared:
				clear(live["GPU"])
			}
		}
	}

	want := map[kvevents.BlockHash]int{}
	s.app.rt.With(func(e *engine.Engine, _ float64) {
		for h, n := range e.Pool().CachedHashes() {
			want[kvpublish.WireHash(h, intHashes)] += n
		}
	})
	if !sameCounts(live["GPU"], want) {
		t.Errorf("GPU: events leave %d blocks, engine holds %d", len(live["GPU"]), len(want))
	}
	wantCPU := map[kvevents.BlockHash]int{}
	for _, h := range s.app.l1.Hashes() {
		wantCPU[kvpublish.WireHash(h, intHashes)]++
	}
	switch mode {
	case lmcache.EventsFull:
		if !sameCounts(live["CPU"], wantCPU) {
			t.Errorf("CPU: events leave %d chunks, L1 holds %d", len(live["CPU"]), len(wantCPU))
		}
	case lmcache.EventsStoreOnly:
		if cpuRemovals != 0 {
			t.Errorf("store-only: %d CPU removals published", cpuRemovals)
		}
		for wh := range wantCPU {
			if !announced[wh] {
				t.Errorf("store-only: resident chunk %v never announced", wh)
			}
		}
		if len(announced) <= len(wantCPU) {
			t.Errorf("store-only: %d chunks announced, L1 holds %d; the workload should have evicted some", len(announced), len(wantCPU))
		}
	case lmcache.EventsNone:
		if len(announced) != 0 || cpuRemovals != 0 {
			t.Errorf("none: %d CPU stores and %d removals published, want none", len(announced), cpuRemovals)
		}
	}
	if s.metric(t, "lmcache:local_cpu_evict_count_total") == 0 {
		t.Error("workload did not evict from L1; the test lost its point")
	}
	var removedGPU bool
	for _, m := range msgs {
		b, _ := kvevents.DecodeBatch(m.Payload)
		for _, ev := range b.Events {
			if r, ok := ev.(kvevents.BlockRemoved); ok && r.Medium == "GPU" {
				removedGPU = true
			}
		}
	}
	if !removedGPU {
		t.Error("workload did not evict from the GPU; the test lost its point")
	}
}

func sameCounts(a, b map[kvevents.BlockHash]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestPromtoolCheckMetrics runs `promtool check metrics` on the exposition.
// The only finding allowed is promtool's objection to ':' in names, and only
// for the upstream vllm:/lmcache: families the simulator must reproduce
// verbatim; warmpath's own metrics must be clean.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not on PATH: run `make tools` (installs Debian's prometheus package)")
	}
	s := startSim(t, func(o *Options) {
		o.KVTransferConfig = `{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}`
		o.KVEventsConfig = `{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://127.0.0.1:1","topic":"kv"}`
	})
	// Populate histograms and labelled counters.
	for range 2 {
		if code, body := postJSON(t, s.base+"/v1/completions", `{"prompt":"`+longPrompt("m", 300)+`","max_tokens":3}`); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
	}
	resp, err := httpGet(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(resp)
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 0 && cmd.ProcessState.ExitCode() != 3 {
		t.Fatalf("promtool failed (exit %d): %s", cmd.ProcessState.ExitCode(), out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		name, problem, _ := strings.Cut(line, " ")
		upstream := strings.HasPrefix(name, "vllm:") || strings.HasPrefix(name, "lmcache:")
		if !upstream || problem != "metric names should not contain ':'" {
			t.Errorf("promtool: %s", line)
		}
	}
	for _, want := range []string{"vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:cache_config_info",
		"vllm:time_to_first_token_seconds_bucket", "vllm:e2e_request_latency_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
		"vllm:prompt_tokens_total", "vllm:generation_tokens_total", "lmcache:num_lookup_tokens_total", "lmcache:num_lookup_hits_total",
		"lmcache:num_vllm_hit_tokens_total", "lmcache:local_cache_usage", "lmcache:request_cache_hit_rate_bucket",
		"warmpath_vllmsim_kv_event_batches_total", "warmpath_vllmsim_kv_event_batches_published_total"} {
		if !bytes.Contains(resp, []byte("\n"+want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
