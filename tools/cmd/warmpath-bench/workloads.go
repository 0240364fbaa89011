package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	msc   workload.ManyShortChats
	fld   workload.FewLongDocs
	bf    workload.BurstyFanout
	skew  workload.SkewedPopularity
	trace string
	tr    workload.Trace
}

func (w *workloadFlags) register(fs *flag.FlagSet) {
	w.sp, w.mr, w.ld = workload.DefaultSharedPrefix(), workload.DefaultMultiRound(), workload.DefaultLongDoc()
	w.msc, w.fld = workload.DefaultManyShortChats(), workload.DefaultFewLongDocs()
	w.bf, w.skew = workload.DefaultBurstyFanout(), workload.DefaultSkewedPopularity()
	fs.StringVar(&w.name, "workload", "multi-round", "shared-prefix, multi-round, long-doc, trace, or a generated shape: "+strings.Join(shapeNames(), ", "))
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
	w.registerShapes(fs)
	fs.StringVar(&w.trace, "trace", "", "trace: Mooncake-format JSONL (default: the shipped synthetic trace)")
	fs.Float64Var(&w.tr.Speedup, "trace-speedup", 1, "trace: replay this many times faster")
	fs.IntVar(&w.tr.Max, "trace-max", 0, "trace: keep the first N requests (0: all)")
}

// shapeNames are the generated workloads that show routing is not tuned to
// one trace (make bench-routing-shapes runs each).
func shapeNames() []string {
	return []string{"many-short-chats", "few-long-docs", "bursty-fanout", "skewed-popularity"}
}

// registerShapes registers the generated shapes' knobs.
func (w *workloadFlags) registerShapes(fs *flag.FlagSet) {
	fs.IntVar(&w.msc.Users, "msc-users", w.msc.Users, "many-short-chats: users")
	fs.IntVar(&w.msc.Groups, "msc-groups", w.msc.Groups, "many-short-chats: system prompts, each shared by a group of users")
	fs.IntVar(&w.msc.System, "msc-system", w.msc.System, "many-short-chats: system prompt tokens")
	fs.IntVar(&w.msc.MinRounds, "msc-min-rounds", w.msc.MinRounds, "many-short-chats: fewest rounds per user")
	fs.IntVar(&w.msc.MaxRounds, "msc-max-rounds", w.msc.MaxRounds, "many-short-chats: most rounds per user")
	fs.IntVar(&w.msc.Question, "msc-question", w.msc.Question, "many-short-chats: question tokens per round")
	fs.IntVar(&w.msc.Answer, "msc-answer", w.msc.Answer, "many-short-chats: answer tokens per round")
	fs.Float64Var(&w.msc.QPS, "msc-qps", w.msc.QPS, "many-short-chats: users starting per second")
	fs.DurationVar(&w.msc.Think, "msc-think", w.msc.Think, "many-short-chats: time between an answer and the next question")
	fs.IntVar(&w.fld.Docs, "fld-docs", w.fld.Docs, "few-long-docs: documents")
	fs.IntVar(&w.fld.MinTokens, "fld-min-tokens", w.fld.MinTokens, "few-long-docs: fewest tokens per document")
	fs.IntVar(&w.fld.MaxTokens, "fld-max-tokens", w.fld.MaxTokens, "few-long-docs: most tokens per document")
	fs.IntVar(&w.fld.Questions, "fld-questions", w.fld.Questions, "few-long-docs: questions per document")
	fs.IntVar(&w.fld.Question, "fld-question", w.fld.Question, "few-long-docs: question tokens")
	fs.IntVar(&w.fld.Output, "fld-output", w.fld.Output, "few-long-docs: output tokens")
	fs.Float64Var(&w.fld.Rate, "fld-rate", w.fld.Rate, "few-long-docs: requests per second")
	fs.IntVar(&w.bf.Contexts, "bf-contexts", w.bf.Contexts, "bursty-fanout: agent contexts alive")
	fs.IntVar(&w.bf.MinContext, "bf-min-context", w.bf.MinContext, "bursty-fanout: fewest tokens of a context")
	fs.IntVar(&w.bf.MaxContext, "bf-max-context", w.bf.MaxContext, "bursty-fanout: most tokens of a context")
	fs.IntVar(&w.bf.Bursts, "bf-bursts", w.bf.Bursts, "bursty-fanout: bursts")
	fs.IntVar(&w.bf.MinFanout, "bf-min-fanout", w.bf.MinFanout, "bursty-fanout: fewest requests per burst")
	fs.IntVar(&w.bf.MaxFanout, "bf-max-fanout", w.bf.MaxFanout, "bursty-fanout: most requests per burst")
	fs.IntVar(&w.bf.Suffix, "bf-suffix", w.bf.Suffix, "bursty-fanout: tokens of each request's own task")
	fs.IntVar(&w.bf.Output, "bf-output", w.bf.Output, "bursty-fanout: output tokens")
	fs.IntVar(&w.bf.Growth, "bf-growth", w.bf.Growth, "bursty-fanout: tokens a context grows by after each burst")
	fs.IntVar(&w.bf.Lifetime, "bf-lifetime", w.bf.Lifetime, "bursty-fanout: bursts on a context before a fresh one replaces it")
	fs.Float64Var(&w.bf.BurstRate, "bf-burst-rate", w.bf.BurstRate, "bursty-fanout: bursts per second")
	fs.DurationVar(&w.bf.Spread, "bf-spread", w.bf.Spread, "bursty-fanout: time over which a burst's requests arrive")
	fs.IntVar(&w.skew.Prefixes, "skew-prefixes", w.skew.Prefixes, "skewed-popularity: distinct prefixes")
	fs.IntVar(&w.skew.MinPrefix, "skew-min-prefix", w.skew.MinPrefix, "skewed-popularity: fewest tokens of a prefix")
	fs.IntVar(&w.skew.MaxPrefix, "skew-max-prefix", w.skew.MaxPrefix, "skewed-popularity: most tokens of a prefix")
	fs.IntVar(&w.skew.Requests, "skew-requests", w.skew.Requests, "skewed-popularity: requests")
	fs.IntVar(&w.skew.Question, "skew-question", w.skew.Question, "skewed-popularity: question tokens")
	fs.IntVar(&w.skew.Output, "skew-output", w.skew.Output, "skewed-popularity: output tokens")
	fs.Float64Var(&w.skew.S, "skew-s", w.skew.S, "skewed-popularity: Zipf exponent (> 1)")
	fs.Float64Var(&w.skew.Rate, "skew-rate", w.skew.Rate, "skewed-popularity: requests per second")
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
	w.msc.Seed, w.fld.Seed, w.bf.Seed, w.skew.Seed = w.seed, w.seed, w.seed, w.seed
	switch w.name {
	case "shared-prefix":
		return w.sp.Generate(words)
	case "multi-round":
		return w.mr.Generate(words)
	case "long-doc":
		return w.ld.Generate(words)
	case "many-short-chats":
		return w.msc.Generate(words)
	case "few-long-docs":
		return w.fld.Generate(words)
	case "bursty-fanout":
		return w.bf.Generate(words)
	case "skewed-popularity":
		return w.skew.Generate(words)
	case "trace":
		recs, err := w.traceRecords()
		if err != nil {
			return nil, err
		}
		return w.tr.Generate(recs, words)
	default:
		return nil, fmt.Errorf("unknown workload %q (shared-prefix, multi-round, long-doc, trace, %s)", w.name, strings.Join(shapeNames(), ", "))
	}
}

// reportName names the workload in reports and in des's default
// bench/results/routing_<name>.json: the trace's file name for a trace
// (the shipped trace's name when none is given), else the workload's.
func (w *workloadFlags) reportName() string {
	switch {
	case w.name != "trace":
		return w.name
	case w.trace == "":
		return workload.ShippedTraceName
	default:
		return strings.TrimSuffix(filepath.Base(w.trace), ".jsonl")
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
