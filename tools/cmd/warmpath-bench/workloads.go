package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/warmpath/warmpath/tools/bench/workload"
	"github.com/warmpath/warmpath/tools/vllmsim/tokenize"
)

// workloadFlags are the knobs of every workload, registered on one flag set.
type workloadFlags struct {
	name  string
	seed  uint64
	sp    workload.SharedPrefix
	mr    workload.MultiRound
	ld    workload.LongDoc
	trace string
	tr    workload.Trace
}

func (w *workloadFlags) register(fs *flag.FlagSet) {
	w.sp, w.mr, w.ld = workload.DefaultSharedPrefix(), workload.DefaultMultiRound(), workload.DefaultLongDoc()
	fs.StringVar(&w.name, "workload", "multi-round", "shared-prefix, multi-round, long-doc or trace")
	fs.Uint64Var(&w.seed, "seed", 1, "workload seed")
	fs.IntVar(&w.sp.Groups, "sp-groups", w.sp.Groups, "shared-prefix: groups")
	fs.IntVar(&w.sp.Prompts, "sp-prompts", w.sp.Prompts, "shared-prefix: prompts per group")
	fs.IntVar(&w.sp.System, "sp-system", w.sp.System, "shared-prefix: system prompt tokens")
	fs.IntVar(&w.sp.Question, "sp-question", w.sp.Question, "shared-prefix: question tokens")
	fs.IntVar(&w.sp.Output, "sp-output", w.sp.Output, "shared-prefix: output tokens")
	fs.Float64Var(&w.sp.Rate, "sp-rate", 8, "shared-prefix: requests per second (0: all at once)")
	fs.IntVar(&w.mr.Users, "mr-users", w.mr.Users, "multi-round: users")
	fs.IntVar(&w.mr.Rounds, "mr-rounds", w.mr.Rounds, "multi-round: rounds per user")
	fs.IntVar(&w.mr.System, "mr-system", w.mr.System, "multi-round: shared system prompt tokens")
	fs.IntVar(&w.mr.Question, "mr-question", w.mr.Question, "multi-round: question tokens per round")
	fs.IntVar(&w.mr.Answer, "mr-answer", w.mr.Answer, "multi-round: answer tokens per round")
	fs.Float64Var(&w.mr.QPS, "mr-qps", w.mr.QPS, "multi-round: users starting per second")
	fs.DurationVar(&w.mr.Think, "mr-think", w.mr.Think, "multi-round: time between an answer and the next question")
	fs.IntVar(&w.ld.Docs, "ld-docs", w.ld.Docs, "long-doc: documents")
	fs.IntVar(&w.ld.DocTokens, "ld-doc-tokens", w.ld.DocTokens, "long-doc: tokens per document (8192, 65536)")
	fs.IntVar(&w.ld.Questions, "ld-questions", w.ld.Questions, "long-doc: questions per document")
	fs.IntVar(&w.ld.Question, "ld-question", w.ld.Question, "long-doc: question tokens")
	fs.IntVar(&w.ld.Output, "ld-output", w.ld.Output, "long-doc: output tokens")
	fs.Float64Var(&w.ld.Rate, "ld-rate", w.ld.Rate, "long-doc: requests per second")
	fs.StringVar(&w.trace, "trace", "", "trace: Mooncake-format JSONL (default: the shipped synthetic trace)")
	fs.Float64Var(&w.tr.Speedup, "trace-speedup", 1, "trace: replay this many times faster")
	fs.IntVar(&w.tr.Max, "trace-max", 0, "trace: keep the first N requests (0: all)")
}

// newTokenizer is the simulator's default tokenizer and chat template,
// whose single-token words the workloads are made of.
func newTokenizer() (*tokenize.Tokenizer, error) {
	return tokenize.New("cl100k_base", "llama3")
}

// generate builds the chosen workload, and the tokenizer that renders it.
func (w *workloadFlags) generate() (*tokenize.Tokenizer, []workload.Request, error) {
	tok, err := newTokenizer()
	if err != nil {
		return nil, nil, err
	}
	reqs, err := w.build(tok.Words())
	return tok, reqs, err
}

// build generates the chosen workload from the tokenizer's words.
func (w *workloadFlags) build(words []uint32) ([]workload.Request, error) {
	w.sp.Seed, w.mr.Seed, w.ld.Seed, w.tr.Seed = w.seed, w.seed, w.seed, w.seed
	switch w.name {
	case "shared-prefix":
		return w.sp.Generate(words)
	case "multi-round":
		return w.mr.Generate(words)
	case "long-doc":
		return w.ld.Generate(words)
	case "trace":
		recs, err := w.traceRecords()
		if err != nil {
			return nil, err
		}
		return w.tr.Generate(recs, words)
	default:
		return nil, fmt.Errorf("unknown workload %q (shared-prefix, multi-round, long-doc, trace)", w.name)
	}
}

// traceRecords reads --trace, or the trace embedded in the workload package.
func (w *workloadFlags) traceRecords() ([]workload.TraceRecord, error) {
	if w.trace == "" {
		return workload.ShippedTrace()
	}
	f, err := os.Open(w.trace)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	return workload.ReadTrace(f)
}

// scaled divides arrival and think times by the simulator's time scale.
func scaled(d time.Duration, scale float64) time.Duration {
	return time.Duration(float64(d) / scale)
}
