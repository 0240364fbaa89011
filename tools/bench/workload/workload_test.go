package workload_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

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

type generator interface {
	Generate([]uint32) ([]workload.Request, error)
}

func TestGeneratorsAreDeterministicPerSeed(t *testing.T) {
	w := words(t)
	tests := []struct {
		name string
		gen  func(seed uint64) generator
	}{
		{"shared-prefix", func(s uint64) generator {
			return workload.SharedPrefix{Groups: 4, Prompts: 3, System: 64, Question: 16, Output: 8, Rate: 10, Seed: s}
		}},
		{"multi-round", func(s uint64) generator {
			return workload.MultiRound{Users: 3, Rounds: 3, System: 32, Question: 8, Answer: 8, QPS: 1, Seed: s}
		}},
		{"long-doc", func(s uint64) generator {
			return workload.LongDoc{Docs: 3, DocTokens: 256, Questions: 2, Question: 8, Output: 8, Rate: 2, Seed: s}
		}},
	}
	for _, sh := range testShapes() {
		tests = append(tests, struct {
			name string
			gen  func(seed uint64) generator
		}{sh.name, sh.gen})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := tt.gen(1).Generate(w)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := tt.gen(1).Generate(w)
			c, _ := tt.gen(2).Generate(w)
			if !reflect.DeepEqual(a, b) {
				t.Error("same seed, different requests")
			}
			if reflect.DeepEqual(a, c) {
				t.Error("different seeds, same requests")
			}
		})
	}
}

func TestSharedPrefixMatchesKnobs(t *testing.T) {
	g := workload.SharedPrefix{Groups: 5, Prompts: 4, System: 100, Question: 20, Output: 7, Rate: 50, Seed: 3}
	reqs, err := g.Generate(words(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 20 {
		t.Fatalf("%d requests, want 5 × 4", len(reqs))
	}
	bySession := map[string][]workload.Request{}
	for i, r := range reqs {
		if r.PromptTokens() != 120 || r.MaxTokens != 7 || r.After != -1 {
			t.Fatalf("request %d: %d prompt tokens, max %d, after %d", i, r.PromptTokens(), r.MaxTokens, r.After)
		}
		if i > 0 && r.Arrival < reqs[i-1].Arrival {
			t.Fatalf("arrivals out of order at %d", i)
		}
		bySession[r.Session] = append(bySession[r.Session], r)
	}
	if len(bySession) != 5 {
		t.Fatalf("%d groups, want 5", len(bySession))
	}
	var systems [][]uint32
	for _, group := range bySession {
		sys := group[0].Tokens()[:100]
		for _, r := range group {
			toks := r.Tokens()
			if !slices.Equal(toks[:100], sys) {
				t.Fatal("prompts of one group do not share the system prompt")
			}
			if slices.Equal(toks[100:], group[0].Tokens()[100:]) && &r.Parts[1][0] != &group[0].Parts[1][0] {
				t.Fatal("two questions are identical")
			}
		}
		systems = append(systems, sys)
	}
	if slices.EqualFunc(systems[0], systems[1], func(a, b uint32) bool { return a == b }) {
		t.Fatal("two groups share a system prompt")
	}
}

func TestMultiRoundHistoryGrows(t *testing.T) {
	g := workload.MultiRound{Users: 3, Rounds: 4, System: 50, Question: 10, Answer: 5, QPS: 2, Think: time.Second, Seed: 1}
	reqs, err := g.Generate(words(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 12 {
		t.Fatalf("%d requests, want 3 × 4", len(reqs))
	}
	sys := reqs[0].Parts[0]
	for i, r := range reqs {
		round := i % 4
		if want := 50 + (round+1)*10 + round*5; r.PromptTokens() != want {
			t.Errorf("request %d (round %d): %d tokens, want %d", i, round, r.PromptTokens(), want)
		}
		if !r.Chat || len(r.Roles) != len(r.Parts) || r.Roles[0] != "system" || r.Roles[len(r.Roles)-1] != "user" {
			t.Errorf("request %d: chat %v roles %v", i, r.Chat, r.Roles)
		}
		if !slices.Equal(r.Parts[0], sys) {
			t.Errorf("request %d does not start with the shared system prompt", i)
		}
		if round == 0 {
			if r.After != -1 {
				t.Errorf("first round waits for %d", r.After)
			}
			continue
		}
		prev := reqs[i-1]
		if r.After != i-1 || r.Session != prev.Session || r.Think != time.Second {
			t.Errorf("round %d of %s: after %d, session %s, think %v", round, r.Session, r.After, prev.Session, r.Think)
		}
		// The previous round's prompt is a prefix of this one's.
		if toks := r.Tokens(); !slices.Equal(toks[:prev.PromptTokens()], prev.Tokens()) {
			t.Errorf("round %d does not extend round %d", round, round-1)
		}
	}
}

func TestLongDocFollowUpsShareTheDocument(t *testing.T) {
	g := workload.LongDoc{Docs: 4, DocTokens: 1000, Questions: 3, Question: 12, Output: 5, Rate: 5, Seed: 9}
	reqs, err := g.Generate(words(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 12 {
		t.Fatalf("%d requests, want 4 × 3", len(reqs))
	}
	docs := map[string][]uint32{}
	for i, r := range reqs {
		if r.PromptTokens() != 1012 {
			t.Fatalf("request %d: %d tokens", i, r.PromptTokens())
		}
		d, ok := docs[r.Session]
		if !ok {
			docs[r.Session] = r.Parts[0]
			continue
		}
		if !slices.Equal(d, r.Parts[0]) {
			t.Fatalf("follow-up %d does not share its document", i)
		}
	}
	// Every document is asked once per round.
	for round := range 3 {
		seen := map[string]bool{}
		for _, r := range reqs[round*4 : round*4+4] {
			seen[r.Session] = true
		}
		if len(seen) != 4 {
			t.Errorf("round %d asks about %d documents, want 4", round, len(seen))
		}
	}
}

func TestTextTokenizesBackToTheIDs(t *testing.T) {
	tok, err := tokenize.New("cl100k_base", "llama3")
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := workload.LongDoc{Docs: 1, DocTokens: 2000, Questions: 1, Question: 10, Output: 1, Seed: 4}.Generate(tok.Words())
	if err != nil {
		t.Fatal(err)
	}
	text, err := tok.Decode(reqs[0].Tokens())
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode(text)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, reqs[0].Tokens()) {
		t.Fatalf("text of %d ids tokenizes to %d different ids", reqs[0].PromptTokens(), len(ids))
	}
}

func TestReadTraceRejectsMalformedLines(t *testing.T) {
	tests := []struct {
		name, input, want string
	}{
		{"bad json", `{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}` + "\n{oops", "line 2"},
		{"negative length", `{"timestamp": 0, "input_length": -3, "output_length": 1, "hash_ids": []}`, "line 1: input_length -3"},
		{"too few ids", `{"timestamp": 0, "input_length": 1025, "output_length": 1, "hash_ids": [0, 1]}`, "want 3"},
		{"too many ids", `{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0, 1]}`, "want 1"},
		{"time goes back", `{"timestamp": 5, "input_length": 1, "output_length": 1, "hash_ids": [0]}` + "\n\n" +
			`{"timestamp": 4, "input_length": 1, "output_length": 1, "hash_ids": [0]}`, "line 3: timestamp 4"},
		{"unknown field", `{"timestamp": 0, "input_len": 1, "output_length": 1, "hash_ids": [0]}`, "line 1"},
		{"two values", `{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [0]} {}`, "more than one"},
		{"too long", strings.Repeat(" ", 2<<20), "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := workload.ReadTrace(strings.NewReader(tt.input))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestShippedTrace(t *testing.T) {
	recs, err := workload.ShippedTrace()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3993 {
		t.Fatalf("%d records, want 3,993", len(recs))
	}
	reqs, err := workload.Trace{Speedup: 2, Seed: 1}.Generate(recs, words(t))
	if err != nil {
		t.Fatal(err)
	}
	last := recs[len(recs)-1]
	if got, want := reqs[len(reqs)-1].Arrival, time.Duration(last.Timestamp)*time.Millisecond/2; got != want {
		t.Errorf("last arrival %v, want %v at speed-up 2", got, want)
	}
	for i, r := range reqs {
		if r.PromptTokens() != recs[i].InputLength || r.MaxTokens != recs[i].OutputLength {
			t.Fatalf("request %d: %d tokens, max %d; record says %d, %d", i, r.PromptTokens(), r.MaxTokens, recs[i].InputLength, recs[i].OutputLength)
		}
	}
	// workloads.md: with an infinite cache, 64% of the blocks are prefix hits.
	if got := workload.OracleHitRate(reqs, workload.TraceBlockTokens); got < 0.60 || got > 0.68 {
		t.Errorf("oracle hit rate %.3f at 512-token blocks, want about 0.64", got)
	}
	capped, _ := workload.Trace{Max: 100, Seed: 1}.Generate(recs, words(t))
	if len(capped) != 100 || !slices.Equal(capped[7].Tokens(), reqs[7].Tokens()) {
		t.Error("a capped replay differs from the full one")
	}
}

func TestOracle(t *testing.T) {
	a, b := []uint32{1, 2, 3, 4}, []uint32{5, 6, 7, 8}
	reqs := []workload.Request{
		{Parts: [][]uint32{a, b}},
		{Arrival: 1, Parts: [][]uint32{a, b}},   // all 8 hit
		{Arrival: 2, Parts: [][]uint32{b, a}},   // different first block: nothing
		{Arrival: 3, Parts: [][]uint32{a, {9}}}, // first block hits, the partial one never
		{Arrival: 4, Parts: [][]uint32{{0}, b}}, // shifted: nothing
	}
	if got, want := workload.OracleHitRate(reqs, 4), float64(8+4)/float64(8+8+8+5+5); got != want {
		t.Fatalf("oracle = %v, want %v", got, want)
	}
}

func FuzzReadTrace(f *testing.F) {
	f.Add([]byte(`{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [0, 1]}` + "\n"))
	f.Add([]byte("{\n"))
	f.Add([]byte(`{"timestamp": 1e30, "input_length": 1, "output_length": 1, "hash_ids": [-1]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := workload.ReadTrace(strings.NewReader(string(b)))
		if err != nil {
			return
		}
		reqs, err := workload.Trace{Seed: 1}.Generate(recs, []uint32{1, 2, 3})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range reqs {
			if r.PromptTokens() != recs[i].InputLength {
				t.Fatalf("request %d has %d tokens, record %d", i, r.PromptTokens(), recs[i].InputLength)
			}
		}
	})
}
