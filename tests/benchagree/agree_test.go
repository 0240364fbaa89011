// Package benchagree checks that warmpath-bench's two modes agree: the
// discrete-event simulation (router strategies over engine models in
// virtual time) and the live run (the real router in front of real
// simulated workers, over HTTP) give the same hit rates, within a stated
// tolerance, and the same order of strategies, on one small workload.
package benchagree

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/warmpath/warmpath/services/router/strategy"
	"github.com/warmpath/warmpath/tests/harness"
	"github.com/warmpath/warmpath/tools/bench/demo"
	"github.com/warmpath/warmpath/tools/bench/des"
	"github.com/warmpath/warmpath/tools/bench/live"
	"github.com/warmpath/warmpath/tools/bench/report"
	"github.com/warmpath/warmpath/tools/bench/stack"
	"github.com/warmpath/warmpath/tools/bench/workload"
	"github.com/warmpath/warmpath/tools/vllmsim/tokenize"
)

const (
	model     = "meta-llama/Llama-3.1-8B-Instruct"
	workers   = 4
	gpuBlocks = 1024
	// timeScale is 1 because the live run shares the machine with the rest
	// of the suite: a run sped up by 3 on busy cores kept requests in flight
	// longer than modelled, the load guard sent them off their prefix's
	// holder, and prefixaware's live hit rate fell to 0.69-0.73 (des 0.81)
	// with three CPU burners beside it; in real time it read 0.77.
	timeScale = 1
	// tolerance is how far apart the two modes' hit rates may be: the live
	// run adds real timing (event delivery, arrival jitter, the router's own
	// latency, magnified by the time scale) the simulation does not have.
	// Seen at time scale 1 beside three CPU burners: 0 points for
	// roundrobin, 2-4 for the cache-aware strategies (live lower); at time
	// scale 3 under the same load, up to 12; at time scale 10, up to 10.
	tolerance = 0.10
)

func TestMain(m *testing.M) { harness.Main(m) }

func TestDESAndLiveAgree(t *testing.T) {
	bin := filepath.Dir(harness.Binary(t, "github.com/warmpath/warmpath/tools/cmd/vllm-sim"))
	harness.Binary(t, "github.com/warmpath/warmpath/services/router/cmd/router")

	tok, err := tokenize.New("cl100k_base", "llama3")
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := workload.SharedPrefix{Groups: 8, Prompts: 6, System: 1024, Question: 32, Output: 16, Rate: 8, Seed: 5}.Generate(tok.Words())
	if err != nil {
		t.Fatal(err)
	}
	text, err := live.FromWorkload(tok, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range text {
		text[i].Arrival /= timeScale
	}

	names := []string{strategy.NameRoundRobin, strategy.NamePrefixAware, strategy.NameKVAware}
	simulated, measured := map[string]float64{}, map[string]float64{}
	for _, name := range names {
		cfg := strategy.Defaults()
		cfg.Name = name
		dc := des.Config{Workers: workers, NumGPUBlocks: gpuBlocks, MaxModelLen: 16384, Strategy: cfg, Model: model}
		res, err := des.Run(dc, reqs)
		if err != nil {
			t.Fatal(err)
		}
		simulated[name] = report.Summarize(des.Report(name, "shared-prefix", dc, reqs, res)).HitRate

		st, err := stack.Start(t.Context(), stack.Config{
			BinDir: bin, LogDir: t.TempDir(), Model: model, Workers: workers, Strategy: name, TimeScale: timeScale,
			SimArgs: []string{"--num-gpu-blocks-override", "1024", "--max-model-len", "16384"},
			// No LMCache L1 in either mode: the GPU prefix cache alone.
			SimEnv: []string{"LMCACHE_LOCAL_CPU=false"},
		})
		if err != nil {
			t.Fatal(err)
		}
		r, err := demo.Live(t.Context(), demo.LiveConfig{BaseURL: st.RouterURL, Model: model, Workers: st.WorkerURLs, TimeScale: timeScale},
			demo.Workload{Name: "shared-prefix", Requests: text})
		if stopErr := st.Stop(); stopErr != nil {
			t.Log(stopErr)
		}
		if err != nil {
			t.Fatal(err)
		}
		s := report.Summarize(r)
		if s.Errors > 0 {
			t.Fatalf("%s: %d of %d live requests failed", name, s.Errors, s.Requests)
		}
		measured[name] = s.HitRate
		t.Logf("%-12s hit rate: des %.3f, live %.3f", name, simulated[name], measured[name])
	}
	for _, name := range names {
		if d := math.Abs(simulated[name] - measured[name]); d > tolerance {
			t.Errorf("%s: des hit rate %.3f and live %.3f differ by %.3f (> %.2f)", name, simulated[name], measured[name], d, tolerance)
		}
	}
	// Both modes rank round robin last.
	for _, name := range names[1:] {
		for mode, rates := range map[string]map[string]float64{"des": simulated, "live": measured} {
			if rates[name] <= rates[strategy.NameRoundRobin] {
				t.Errorf("%s: %s hit rate %.3f not above roundrobin's %.3f", mode, name, rates[name], rates[strategy.NameRoundRobin])
			}
		}
	}
}
