package des_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/warmpath/warmpath/services/router/strategy"
	"github.com/warmpath/warmpath/tools/bench/des"
	"github.com/warmpath/warmpath/tools/bench/report"
	"github.com/warmpath/warmpath/tools/bench/workload"
	"github.com/warmpath/warmpath/tools/vllmsim/tokenize"
)

func words(t testing.TB) []uint32 {
	t.Helper()
	tok, err := tokenize.New("cl100k_base", "llama3")
	if err != nil {
		t.Fatal(err)
	}
	return tok.Words()
}

func fleet(name string, workers int) des.Config {
	sc := strategy.Defaults()
	sc.Name = name
	return des.Config{Workers: workers, NumGPUBlocks: 2048, L1Bytes: 4e9, Strategy: sc, Model: "m"}
}

func sharedPrefix(t testing.TB) []workload.Request {
	t.Helper()
	reqs, err := workload.SharedPrefix{Groups: 16, Prompts: 8, System: 2048, Question: 64, Output: 32, Rate: 20, Seed: 1}.Generate(words(t))
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

func summarize(t testing.TB, cfg des.Config, reqs []workload.Request) report.Summary {
	t.Helper()
	res, err := des.Run(cfg, reqs)
	if err != nil {
		t.Fatal(err)
	}
	r := des.Report(cfg.Strategy.Name, "w", cfg, reqs, res)
	oracle, err := des.Oracle(cfg, reqs, res)
	if err != nil {
		t.Fatal(err)
	}
	r.OracleHitRate, r.OracleTTFTP90 = oracle.HitRate, oracle.TTFTP90
	return report.Summarize(r)
}

func TestDeterministic(t *testing.T) {
	reqs := sharedPrefix(t)
	for _, name := range strategy.Names {
		a, err := des.Run(fleet(name, 4), reqs)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := des.Run(fleet(name, 4), reqs)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: two runs of the same input differ", name)
		}
	}
}

func TestCacheAwareBeatsRoundRobin(t *testing.T) {
	reqs := sharedPrefix(t)
	sums := map[string]report.Summary{}
	for _, name := range strategy.Names {
		s := summarize(t, fleet(name, 8), reqs)
		sums[name] = s
		t.Logf("%-12s hit %.3f (oracle %.3f) ttft p50 %.0f ms p90 %.0f ms imbalance %.2f", name, s.HitRate, s.OracleHitRate, s.TTFTP50ms, s.TTFTP90ms, s.Imbalance)
		if s.Errors != 0 || s.Requests != len(reqs) {
			t.Errorf("%s: %d of %d requests, %d errors", name, s.Requests, len(reqs), s.Errors)
		}
		if s.HitRate > s.OracleHitRate+1e-9 {
			t.Errorf("%s: hit rate %.3f beats the oracle %.3f", name, s.HitRate, s.OracleHitRate)
		}
	}
	for _, name := range []string{strategy.NamePrefixAware, strategy.NameKVAware} {
		if !(sums[name].HitRate > sums[strategy.NameRoundRobin].HitRate+0.1) {
			t.Errorf("%s hit rate %.3f, want well above roundrobin's %.3f", name, sums[name].HitRate, sums[strategy.NameRoundRobin].HitRate)
		}
	}
}

func TestSessionKeepsAConversationOnOneWorker(t *testing.T) {
	reqs, err := workload.MultiRound{Users: 12, Rounds: 4, System: 500, Question: 50, Answer: 20, QPS: 4, Think: time.Second, Seed: 2}.Generate(words(t))
	if err != nil {
		t.Fatal(err)
	}
	res, err := des.Run(fleet(strategy.NameSession, 4), reqs)
	if err != nil {
		t.Fatal(err)
	}
	where := map[string]string{}
	for i, rec := range res.Records {
		if w, ok := where[reqs[i].Session]; ok && w != rec.Worker {
			t.Fatalf("%s moved from %s to %s", reqs[i].Session, w, rec.Worker)
		}
		where[reqs[i].Session] = rec.Worker
		// Rounds wait for the previous one plus the think time.
		if a := reqs[i].After; a >= 0 && rec.Arrival < res.Records[a].Finished+1 {
			t.Fatalf("request %d arrived at %.3f, before round %d finished (%.3f) plus think", i, rec.Arrival, a, res.Records[a].Finished)
		}
	}
}

// TestShippedTrace replays the first 400 requests of the Mooncake trace on
// 8 workers; `make bench-routing` replays all of it.
func TestShippedTrace(t *testing.T) {
	recs, err := workload.ShippedTrace()
	if err != nil {
		t.Fatal(err)
	}
	tr := workload.Trace{Seed: 1, Max: 400}
	reqs, err := tr.Generate(recs, words(t))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cfg := fleet(strategy.NameKVAware, 8)
	cfg.NumGPUBlocks = 0 // the preset's: prompts reach 191K tokens
	s := summarize(t, cfg, reqs)
	t.Logf("%d requests in %v: hit %.3f of oracle %.3f, ttft p90 %.0f ms, imbalance %.2f", len(reqs), time.Since(start), s.HitRate, s.OracleHitRate, s.TTFTP90ms, s.Imbalance)
	// Prompts over Llama-3.1's 131,072-token context are refused, as vLLM
	// refuses them; there are a handful.
	if s.Requests != len(reqs) || s.Errors > len(reqs)/100 || s.HitRate <= 0 {
		t.Fatalf("replayed %d of %d requests (%d refused) with hit rate %.3f", s.Requests, len(reqs), s.Errors, s.HitRate)
	}
}

func BenchmarkReplayTrace(b *testing.B) {
	recs, err := workload.ShippedTrace()
	if err != nil {
		b.Fatal(err)
	}
	reqs, err := workload.Trace{Seed: 1, Max: 500}.Generate(recs, words(b))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		cfg := fleet(strategy.NameKVAware, 8)
		cfg.NumGPUBlocks = 0
		if _, err := des.Run(cfg, reqs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(reqs)*b.N)/b.Elapsed().Seconds(), "requests/s")
}

// TestShapesComplete runs each generated shape, at test size, through
// every strategy: every request is answered and no strategy beats the
// oracle.
func TestShapesComplete(t *testing.T) {
	w := words(t)
	tests := []struct {
		name string
		gen  interface {
			Generate([]uint32) ([]workload.Request, error)
		}
	}{
		{"many-short-chats", workload.ManyShortChats{Users: 24, Groups: 4, System: 256, MinRounds: 3, MaxRounds: 5,
			Question: 32, Answer: 32, QPS: 8, Think: time.Second, Seed: 1}},
		{"few-long-docs", workload.FewLongDocs{Docs: 4, MinTokens: 4096, MaxTokens: 8192, Questions: 4, Question: 32,
			Output: 16, Rate: 4, Seed: 1}},
		{"bursty-fanout", workload.BurstyFanout{Contexts: 2, MinContext: 1024, MaxContext: 2048, Bursts: 4, MinFanout: 8,
			MaxFanout: 16, Suffix: 32, Output: 16, Growth: 64, Lifetime: 2, BurstRate: 1, Spread: 100 * time.Millisecond, Seed: 1}},
		{"skewed-popularity", workload.SkewedPopularity{Prefixes: 30, MinPrefix: 256, MaxPrefix: 1024, Requests: 60,
			Question: 32, Output: 16, S: 1.1, Rate: 20, Seed: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs, err := tt.gen.Generate(w)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range strategy.Names {
				s := summarize(t, fleet(name, 4), reqs)
				if s.Errors != 0 || s.Requests != len(reqs) {
					t.Errorf("%s: %d of %d requests, %d errors", name, s.Requests, len(reqs), s.Errors)
				}
				if s.HitRate > s.OracleHitRate+1e-9 {
					t.Errorf("%s: hit rate %.3f beats the oracle %.3f", name, s.HitRate, s.OracleHitRate)
				}
			}
		})
	}
}

// TestRouterReplicas: one router is the default; with several, each keeps
// its own state, sharing only what the workers publish. Session placement
// is stateless (rendezvous hashing), so three replicas keep a conversation
// where one would; prefixaware learns from its own decisions only, so
// replicas that each saw a third of a document's questions disagree about
// where it is, and the hit rate falls — the gap `warmpath-bench replicas`
// measures.
func TestRouterReplicas(t *testing.T) {
	chats, err := workload.MultiRound{Users: 12, Rounds: 4, System: 500, Question: 50, Answer: 20, QPS: 4, Think: time.Second, Seed: 2}.Generate(words(t))
	if err != nil {
		t.Fatal(err)
	}
	docs := sharedPrefix(t)
	for _, tt := range []struct {
		name     string
		reqs     []workload.Request
		agree    bool
		strategy string
	}{
		{"session over chats", chats, true, strategy.NameSession},
		{"prefixaware over shared prefixes", docs, false, strategy.NamePrefixAware},
	} {
		t.Run(tt.name, func(t *testing.T) {
			one := fleet(tt.strategy, 4)
			a, err := des.Run(one, tt.reqs)
			if err != nil {
				t.Fatal(err)
			}
			one.Routers = 1
			if b, _ := des.Run(one, tt.reqs); !reflect.DeepEqual(a, b) {
				t.Fatal("Routers 1 differs from the default")
			}
			three := fleet(tt.strategy, 4)
			three.Routers, three.Seed = 3, 7
			s1, s3 := summarize(t, one, tt.reqs), summarize(t, three, tt.reqs)
			t.Logf("hit rate: one router %.3f, three %.3f", s1.HitRate, s3.HitRate)
			if s3.Errors != 0 || s3.Requests != len(tt.reqs) {
				t.Fatalf("three routers: %d of %d requests, %d errors", s3.Requests, len(tt.reqs), s3.Errors)
			}
			if agree := s3.HitRate >= s1.HitRate-0.02; agree != tt.agree {
				t.Fatalf("three routers within 2 points of one: %v, want %v", agree, tt.agree)
			}
		})
	}
}

// TestSharedL2ServesEveryWorker: long documents over a fleet whose L1s
// are too small to matter. With the shared L2 a document any worker
// prefilled is fetched by every other, so even round robin reaches
// near the oracle's hit rate, and no strategy loses hits by having it.
func TestSharedL2ServesEveryWorker(t *testing.T) {
	reqs, err := workload.LongDoc{Docs: 8, DocTokens: 4096, Questions: 6, Question: 32, Output: 8, Rate: 8, Seed: 1}.Generate(words(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range strategy.Names {
		t.Run(name, func(t *testing.T) {
			cfg := fleet(name, 4)
			cfg.NumGPUBlocks, cfg.L1Bytes = 512, 64<<20 // 8K tokens of GPU cache, two chunks of L1
			without := summarize(t, cfg, reqs)
			cfg.L2Bytes = 8e9
			with := summarize(t, cfg, reqs)
			t.Logf("hit rate %.3f without L2, %.3f with (oracle %.3f)", without.HitRate, with.HitRate, with.OracleHitRate)
			if with.Errors != 0 || with.Requests != len(reqs) {
				t.Fatalf("%d of %d requests, %d errors", with.Requests, len(reqs), with.Errors)
			}
			// The summary's hit rate is rounded to three decimals, the oracle's is not.
			if with.HitRate < without.HitRate || with.HitRate > with.OracleHitRate+5e-4 {
				t.Fatalf("hit rate %g with L2, %g without, oracle %g", with.HitRate, without.HitRate, with.OracleHitRate)
			}
			// Every question after a document's first can come from L2.
			if with.HitRate < 0.7*with.OracleHitRate {
				t.Fatalf("hit rate %.3f with L2, under 70%% of the oracle's %.3f", with.HitRate, with.OracleHitRate)
			}
		})
	}
}
