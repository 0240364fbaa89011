package des

import (
	"math"
	"time"

	"github.com/warmpath/warmpath/libs/timing"
	"github.com/warmpath/warmpath/tools/bench/workload"
)

// Bound is the least engine time any fleet of these workers needs to serve
// a run's requests, given the oracle's cache hits: the work the oracle
// cannot avoid, packed into steps as densely as the engine's limits and
// the timing model allow. Over a long enough run a fleet of n workers
// serves at most n seconds of engine time per second, so n x Requests /
// WorkerSeconds bounds its throughput, whatever the router.
type Bound struct {
	Requests, OutputTokens int
	// HitRate and TTFTP90 are the oracle's (OracleResult).
	HitRate float64
	TTFTP90 time.Duration
	// Steps is the fewest engine steps, over all workers, that can hold
	// the work: each step takes at most MaxNumBatchedTokens new tokens
	// and MaxNumSeqs sequences, and a request is in one step per output
	// token.
	Steps int
	// ComputeSeconds is the FLOPs of every token the oracle computes
	// (prompt tokens past its hits, then each decoded token) at the
	// effective rate; MemorySeconds reads the weights once per step plus
	// the KV each of those tokens attends to; OverheadSeconds is the
	// steps' fixed costs.
	ComputeSeconds, MemorySeconds, OverheadSeconds float64
	// WorkerSeconds is the bound: max(compute, memory) + overhead. A step
	// costs the larger of its own compute and memory time, and a sum of
	// maxima is at least the maximum of the sums.
	WorkerSeconds float64
}

// work is one request's share of the bound: its prompt, the oracle's hits
// on it and its output tokens.
type work struct{ prompt, hits, out int }

// OracleBound serves the requests through the oracle (Oracle) and bounds
// the engine time they need with its hits (Bound). res gives the order,
// the refusals, and each request's output tokens as the fleet made them.
// Loads from L1 and L2 are left out, and the oracle's prefix cache is
// taken as the least any fleet misses (the premise of Oracle's hit rate);
// both only lower the bound.
func OracleBound(cfg Config, reqs []workload.Request, res *Result) (Bound, error) {
	served, err := oracle(cfg, reqs, res)
	if err != nil {
		return Bound{}, err
	}
	f, err := newFleet(cfg)
	if err != nil {
		return Bound{}, err
	}
	ws := make([]work, len(served))
	for i, s := range served {
		ws[i] = work{prompt: s.prompt, hits: s.hits, out: res.Records[s.req].Out}
	}
	b := engineBound(f.model, f.cfg.MaxNumSeqs, f.cfg.MaxNumBatchedTokens, ws)
	o := summarise(served)
	b.HitRate, b.TTFTP90 = o.HitRate, o.TTFTP90
	return b, nil
}

// engineBound is Bound's engine time for ws on model m, with the engine's
// per-step limits.
func engineBound(m timing.Model, maxSeqs, maxTokens int, ws []work) Bound {
	p := m.Preset
	var b Bound
	var newTokens, seqSteps int
	var kvRead float64 // tokens of KV read
	for _, w := range ws {
		if w.out < 1 {
			continue
		}
		b.Requests++
		b.OutputTokens += w.out
		// The prompt past the hits, then every output token but the last
		// (the prefill yields the first, each decode step one more): the
		// positions hits .. prompt+out-2, whose FLOPs no batching changes.
		n := w.prompt - w.hits + w.out - 1
		newTokens += n
		seqSteps += w.out
		b.ComputeSeconds += m.PrefillComputeSeconds(w.hits, n)
		// The prefill reads the cached prefix's KV once (more if chunked);
		// decode step j reads the prompt and the j-1 tokens before it.
		d := float64(w.out - 1)
		kvRead += float64(w.hits) + d*float64(w.prompt) + d*(d-1)/2
	}
	if b.Requests == 0 {
		return b
	}
	b.Steps = max(ceilDiv(newTokens, maxTokens), ceilDiv(seqSteps, maxSeqs))
	b.MemorySeconds = m.ReadSeconds(float64(b.Steps)*p.WeightBytes() + kvRead*float64(p.KVBytesPerToken()))
	perStep := p.StepOverheadSeconds
	if p.TensorParallel > 1 {
		perStep += 2 * float64(p.Layers) * p.AllReduceSeconds
	}
	b.OverheadSeconds = float64(b.Steps) * perStep
	b.WorkerSeconds = math.Max(b.ComputeSeconds, b.MemorySeconds) + b.OverheadSeconds
	return b
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
