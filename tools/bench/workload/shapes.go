package workload

// The generated shapes: four workloads that stress routing differently from
// the Mooncake trace, so a strategy tuned to one trace shows it
// (docs/benchmarks.md, "Workloads"). Their default sizes are for
// `make bench-routing-shapes`: 8 workers of the default preset
// (llama-3.1-8b-h100: 24,626 GPU blocks of 16 tokens, 394K tokens, per
// worker; 100 GB of L1 is 763K tokens) and a des run of every strategy in
// a minute or two of CPU.

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// ManyShortChats is a consumer chat service: Users users, each in one of
// Groups groups sharing a short system prompt (System tokens), hold a chat
// of MinRounds to MaxRounds rounds (Question tokens asked, Answer tokens
// answered). Users start Poisson at QPS per second; each round is sent
// Think after the previous one finished. The session key is the user.
type ManyShortChats struct {
	Users, Groups, System, MinRounds, MaxRounds, Question, Answer int
	QPS                                                           float64
	Think                                                         time.Duration
	Seed                                                          uint64
}

// DefaultManyShortChats has 400 users over 20 system prompts: the fleet's
// caches hold every history, so what separates strategies is whether a
// user's next round finds the worker holding its history.
func DefaultManyShortChats() ManyShortChats {
	return ManyShortChats{Users: 400, Groups: 20, System: 512, MinRounds: 3, MaxRounds: 8, Question: 48, Answer: 96,
		QPS: 4, Think: 5 * time.Second}
}

// Generate builds the requests; each user's rounds are consecutive.
func (w ManyShortChats) Generate(words []uint32) ([]Request, error) {
	if w.Users < 1 || w.Groups < 1 || w.System < 0 || w.MinRounds < 1 || w.MaxRounds < w.MinRounds ||
		w.Question < 1 || w.Answer < 1 || len(words) == 0 {
		return nil, errors.New("workload: many-short-chats needs users, groups, rounds, question and answer ≥ 1, max rounds ≥ min rounds, system ≥ 0 and words")
	}
	v := newVocab(words, w.Seed, 7)
	systems := make([][]uint32, w.Groups)
	for g := range systems {
		systems[g] = v.text(w.System)
	}
	rng := rand.New(rand.NewPCG(w.Seed, 8))
	starts := poisson(rng, w.Users, w.QPS)
	out := make([]Request, 0, w.Users*(w.MinRounds+w.MaxRounds)/2)
	for u := range w.Users {
		parts, roles := [][]uint32{systems[rng.IntN(w.Groups)]}, []string{"system"}
		rounds := w.MinRounds + rng.IntN(w.MaxRounds-w.MinRounds+1)
		for r := range rounds {
			parts, roles = append(parts, v.text(w.Question)), append(roles, "user")
			req := Request{Arrival: starts[u], After: -1, Think: w.Think, Session: fmt.Sprintf("user-%d", u),
				Parts: clip(parts), Chat: true, Roles: clipS(roles), MaxTokens: w.Answer}
			if r > 0 {
				req.After = len(out) - 1
			}
			out = append(out, req)
			parts, roles = append(parts, v.text(w.Answer)), append(roles, "assistant")
		}
	}
	return out, nil
}

// FewLongDocs is document QA over long documents: Docs documents of
// MinTokens to MaxTokens tokens, each asked Questions questions (Question
// tokens, Output tokens answered) in a random interleaving, Poisson at Rate
// per second. The session key is the document.
type FewLongDocs struct {
	Docs, MinTokens, MaxTokens, Questions, Question, Output int
	Rate                                                    float64
	Seed                                                    uint64
}

// DefaultFewLongDocs is 72 documents of 32K-64K tokens, 3.5M tokens: 1.1
// times what the 8 workers' GPU caches hold together (3.15M), and 4.6
// times one worker's 100 GB L1 (763K) but 0.57 times the fleet's — so the
// fleet holds the set only if each document stays on one worker, where
// its follow-ups find it in L1 once the GPU has evicted it. Few documents
// for their size, 10 questions each; more would make a des run of every
// strategy take minutes.
func DefaultFewLongDocs() FewLongDocs {
	return FewLongDocs{Docs: 72, MinTokens: 32768, MaxTokens: 65536, Questions: 10, Question: 64, Output: 128, Rate: 2}
}

// Generate builds the requests, in arrival order.
func (w FewLongDocs) Generate(words []uint32) ([]Request, error) {
	if w.Docs < 1 || w.MinTokens < 1 || w.MaxTokens < w.MinTokens || w.Questions < 1 || w.Question < 1 ||
		w.Output < 1 || len(words) == 0 {
		return nil, errors.New("workload: few-long-docs needs docs, min tokens, questions, question and output ≥ 1, max tokens ≥ min tokens and words")
	}
	v := newVocab(words, w.Seed, 9)
	rng := rand.New(rand.NewPCG(w.Seed, 10))
	docs := make([][]uint32, w.Docs)
	for i := range docs {
		docs[i] = v.text(w.MinTokens + rng.IntN(w.MaxTokens-w.MinTokens+1))
	}
	// Every document's questions, shuffled: unlike long-doc's rounds, a
	// document's next question may come at once or much later.
	order := make([]int, 0, w.Docs*w.Questions)
	for d := range w.Docs {
		for range w.Questions {
			order = append(order, d)
		}
	}
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	arrivals := poisson(rng, len(order), w.Rate)
	out := make([]Request, len(order))
	for i, d := range order {
		out[i] = Request{Arrival: arrivals[i], After: -1, Session: fmt.Sprintf("doc-%d", d),
			Parts: [][]uint32{docs[d], v.text(w.Question)}, MaxTokens: w.Output}
	}
	return out, nil
}

// BurstyFanout is agents fanning out: Contexts agent contexts (MinContext
// to MaxContext tokens) are alive; Bursts bursts start Poisson at
// BurstRate per second, each picking a context at random and sending
// MinFanout to MaxFanout requests — the context plus a distinct Suffix-token
// task, Output tokens answered — spread uniformly over Spread. After each
// burst its context grows by Growth tokens (the agent's new observations),
// so the next burst on it shares all but the tail; after Lifetime bursts
// the agent is done and a fresh context takes its place, so a burst on a
// context nobody has cached yet comes now and then. The session key is the
// agent.
type BurstyFanout struct {
	Contexts, MinContext, MaxContext, Bursts, MinFanout, MaxFanout, Suffix, Output, Growth, Lifetime int
	BurstRate                                                                                        float64
	Spread                                                                                           time.Duration
	Seed                                                                                             uint64
}

// DefaultBurstyFanout is 60 bursts of 16-64 requests over 8 contexts of
// 4K-16K tokens, a burst every 2 s on average, each within 250 ms: a burst
// is more than one worker should take at once, so sending it all where its
// context is cached queues it.
func DefaultBurstyFanout() BurstyFanout {
	return BurstyFanout{Contexts: 8, MinContext: 4096, MaxContext: 16384, Bursts: 60, MinFanout: 16, MaxFanout: 64,
		Suffix: 128, Output: 128, Growth: 512, Lifetime: 3, BurstRate: 0.5, Spread: 250 * time.Millisecond}
}

// Generate builds the requests, in arrival order.
func (w BurstyFanout) Generate(words []uint32) ([]Request, error) {
	if w.Contexts < 1 || w.MinContext < 1 || w.MaxContext < w.MinContext || w.Bursts < 1 || w.MinFanout < 1 ||
		w.MaxFanout < w.MinFanout || w.Suffix < 1 || w.Output < 1 || w.Growth < 0 || w.Lifetime < 1 || w.Spread < 0 ||
		len(words) == 0 {
		return nil, errors.New("workload: bursty-fanout needs contexts, min context, bursts, min fanout, suffix, output and lifetime ≥ 1, max ≥ min, growth and spread ≥ 0 and words")
	}
	v := newVocab(words, w.Seed, 11)
	rng := rand.New(rand.NewPCG(w.Seed, 12))
	// A context is a list of parts, so growing it shares the old ones.
	contexts, agents, bursts := make([][][]uint32, w.Contexts), make([]int, w.Contexts), make([]int, w.Contexts)
	for c := range contexts {
		contexts[c], agents[c] = [][]uint32{v.text(w.MinContext + rng.IntN(w.MaxContext-w.MinContext+1))}, c
	}
	next := w.Contexts
	var out []Request
	for _, start := range poisson(rng, w.Bursts, w.BurstRate) {
		c := rng.IntN(w.Contexts)
		for range w.MinFanout + rng.IntN(w.MaxFanout-w.MinFanout+1) {
			at := start + time.Duration(rng.Int64N(int64(w.Spread)+1))
			out = append(out, Request{Arrival: at, After: -1, Session: fmt.Sprintf("agent-%d", agents[c]),
				Parts: append(clip(contexts[c]), v.text(w.Suffix)), MaxTokens: w.Output})
		}
		if bursts[c]++; bursts[c] == w.Lifetime {
			contexts[c], agents[c], bursts[c] = [][]uint32{v.text(w.MinContext + rng.IntN(w.MaxContext-w.MinContext+1))}, next, 0
			next++
		} else if w.Growth > 0 {
			contexts[c] = append(clip(contexts[c]), v.text(w.Growth))
		}
	}
	// Bursts overlap when one starts within another's spread.
	slices.SortStableFunc(out, func(a, b Request) int { return cmp.Compare(a.Arrival, b.Arrival) })
	return out, nil
}

// SkewedPopularity is many tenants' prefixes (system prompts, documents)
// of MinPrefix to MaxPrefix tokens, Prefixes of them, each request drawing
// one with Zipf popularity of exponent S (the k-th most popular drawn in
// proportion to 1/k^S) and adding a Question-token question, Output
// tokens answered. Requests arrive Poisson at Rate per second. The session
// key is the prefix's tenant.
type SkewedPopularity struct {
	Prefixes, MinPrefix, MaxPrefix, Requests, Question, Output int
	S, Rate                                                    float64
	Seed                                                       uint64
}

// DefaultSkewedPopularity is 3000 requests over 1000 prefixes of 1K-8K
// tokens at s = 1.1: the hottest prefix takes about a fifth of the
// requests (more than one worker's share of 8), about half the prefixes
// are never asked and a quarter only once — a cold tail no cache helps,
// which evicts the warm middle.
func DefaultSkewedPopularity() SkewedPopularity {
	return SkewedPopularity{Prefixes: 1000, MinPrefix: 1024, MaxPrefix: 8192, Requests: 3000, Question: 64, Output: 128,
		S: 1.1, Rate: 12}
}

// Generate builds the requests, in arrival order.
func (w SkewedPopularity) Generate(words []uint32) ([]Request, error) {
	if w.Prefixes < 1 || w.MinPrefix < 1 || w.MaxPrefix < w.MinPrefix || w.Requests < 1 || w.Question < 1 ||
		w.Output < 1 || !(w.S > 1) || len(words) == 0 {
		return nil, errors.New("workload: skewed-popularity needs prefixes, min prefix, requests, question and output ≥ 1, max prefix ≥ min prefix, s > 1 and words")
	}
	v := newVocab(words, w.Seed, 13)
	rng := rand.New(rand.NewPCG(w.Seed, 14))
	prefixes := make([][]uint32, w.Prefixes)
	for i := range prefixes {
		prefixes[i] = v.text(w.MinPrefix + rng.IntN(w.MaxPrefix-w.MinPrefix+1))
	}
	// rand.Zipf draws k in [0, Prefixes) with P(k) ∝ (1+k)^-S; prefix k's
	// rank is k+1, and ranks are not tied to sizes (those were drawn
	// independently above).
	zipf := rand.NewZipf(rng, w.S, 1, uint64(w.Prefixes-1))
	arrivals := poisson(rng, w.Requests, w.Rate)
	out := make([]Request, w.Requests)
	for i := range out {
		k := zipf.Uint64()
		out[i] = Request{Arrival: arrivals[i], After: -1, Session: fmt.Sprintf("tenant-%d", k),
			Parts: [][]uint32{prefixes[k], v.text(w.Question)}, MaxTokens: w.Output}
	}
	return out, nil
}
