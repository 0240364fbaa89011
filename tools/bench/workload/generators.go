package workload

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// SharedPrefix is SGLang's generated-shared-prefix workload: Groups groups
// of Prompts prompts; each prompt is its group's system prompt (System
// tokens) followed by a unique question (Question tokens); Output tokens
// are generated. Requests arrive in random order, Poisson at Rate per
// second (all at once when Rate is 0).
type SharedPrefix struct {
	Groups, Prompts, System, Question, Output int
	Rate                                      float64
	Seed                                      uint64
}

// DefaultSharedPrefix is SGLang's default.
func DefaultSharedPrefix() SharedPrefix {
	return SharedPrefix{Groups: 64, Prompts: 16, System: 2048, Question: 128, Output: 256}
}

// Generate builds the requests from the vocabulary words.
func (w SharedPrefix) Generate(words []uint32) ([]Request, error) {
	if w.Groups < 1 || w.Prompts < 1 || w.System < 0 || w.Question < 1 || w.Output < 1 || len(words) == 0 {
		return nil, errors.New("workload: shared-prefix needs groups, prompts, question and output ≥ 1, system ≥ 0 and words")
	}
	v := newVocab(words, w.Seed, 1)
	out := make([]Request, 0, w.Groups*w.Prompts)
	for g := range w.Groups {
		sys := v.text(w.System)
		for range w.Prompts {
			out = append(out, Request{After: -1, Session: fmt.Sprintf("group-%d", g),
				Parts: [][]uint32{sys, v.text(w.Question)}, MaxTokens: w.Output})
		}
	}
	rng := rand.New(rand.NewPCG(w.Seed, 2))
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	for i, at := range poisson(rng, len(out), w.Rate) {
		out[i].Arrival = at
	}
	return out, nil
}

// MultiRound is the multi-round QA workload of vLLM production-stack and
// LMCache: Users users each hold a chat of Rounds rounds; every request is
// the shared system prompt (System tokens), the user's history so far and
// a new question (Question tokens); the answer is Answer tokens. Users
// start at QPS per second (Poisson); each round is sent Think after the
// previous one finished (Request.After).
//
// The history's assistant turns are the generator's own deterministic
// answers, not what the model returned: the live mode replays them so a
// round's prompt extends the previous one exactly, as it would with a real
// model answering the same way twice.
type MultiRound struct {
	Users, Rounds, System, Question, Answer int
	QPS                                     float64
	Think                                   time.Duration
	Seed                                    uint64
}

// DefaultMultiRound is production-stack's run.sh shape, scaled down
// (their U=320, history up to 20000 tokens).
func DefaultMultiRound() MultiRound {
	return MultiRound{Users: 32, Rounds: 5, System: 1000, Question: 200, Answer: 100, QPS: 2}
}

// Generate builds the requests; each user's rounds are consecutive.
func (w MultiRound) Generate(words []uint32) ([]Request, error) {
	if w.Users < 1 || w.Rounds < 1 || w.System < 0 || w.Question < 1 || w.Answer < 1 || len(words) == 0 {
		return nil, errors.New("workload: multi-round needs users, rounds, question and answer ≥ 1, system ≥ 0 and words")
	}
	v := newVocab(words, w.Seed, 3)
	sys := v.text(w.System)
	starts := poisson(rand.New(rand.NewPCG(w.Seed, 4)), w.Users, w.QPS)
	out := make([]Request, 0, w.Users*w.Rounds)
	for u := range w.Users {
		parts, roles := [][]uint32{sys}, []string{"system"}
		for r := range w.Rounds {
			parts = append(parts, v.text(w.Question))
			roles = append(roles, "user")
			req := Request{Arrival: starts[u], After: -1, Think: w.Think, Session: fmt.Sprintf("user-%d", u),
				Parts: clip(parts), Chat: true, Roles: clipS(roles), MaxTokens: w.Answer}
			if r > 0 {
				req.After = len(out) - 1
			}
			out = append(out, req)
			parts = append(parts, v.text(w.Answer))
			roles = append(roles, "assistant")
		}
	}
	return out, nil
}

// LongDoc is long-context document QA: Docs documents of DocTokens tokens,
// each asked Questions follow-up questions (Question tokens, Output tokens
// answered). The questions come in rounds, every document once per round
// in a shuffled order, Poisson at Rate per second.
type LongDoc struct {
	Docs, DocTokens, Questions, Question, Output int
	Rate                                         float64
	Seed                                         uint64
}

// DefaultLongDoc uses the managed offering's 8K-token contexts.
func DefaultLongDoc() LongDoc {
	return LongDoc{Docs: 16, DocTokens: 8192, Questions: 4, Question: 64, Output: 64, Rate: 4}
}

// Generate builds the requests.
func (w LongDoc) Generate(words []uint32) ([]Request, error) {
	if w.Docs < 1 || w.DocTokens < 1 || w.Questions < 1 || w.Question < 1 || w.Output < 1 || len(words) == 0 {
		return nil, errors.New("workload: long-doc needs docs, doc tokens, questions, question and output ≥ 1 and words")
	}
	v := newVocab(words, w.Seed, 5)
	docs := make([][]uint32, w.Docs)
	for i := range docs {
		docs[i] = v.text(w.DocTokens)
	}
	rng := rand.New(rand.NewPCG(w.Seed, 6))
	out := make([]Request, 0, w.Docs*w.Questions)
	for range w.Questions {
		for _, d := range rng.Perm(w.Docs) {
			out = append(out, Request{After: -1, Session: fmt.Sprintf("doc-%d", d),
				Parts: [][]uint32{docs[d], v.text(w.Question)}, MaxTokens: w.Output})
		}
	}
	for i, at := range poisson(rng, len(out), w.Rate) {
		out[i].Arrival = at
	}
	return out, nil
}

func clip(p [][]uint32) [][]uint32 { return append([][]uint32(nil), p...) }

func clipS(s []string) []string { return append([]string(nil), s...) }
