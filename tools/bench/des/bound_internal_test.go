package des

import (
	"math"
	"testing"

	"github.com/warmpath/warmpath/libs/timing"
)

// TestEngineBound works the bound out by hand on a toy model: 1e9
// parameters in bf16 (2e9 bytes of weights), one layer of hidden size
// 1000 (attention: 4,000 FLOPs per token per token of context), 1,000
// bytes of KV per token, 1e12 B/s of HBM and a 1 ms step overhead, at
// full utilisation; 1e12 FLOP/s unless the case says otherwise.
func TestEngineBound(t *testing.T) {
	toy := func(flops float64) timing.Model {
		m, err := timing.NewModel(timing.Preset{Name: "toy", Params: 1e9, Layers: 1, Hidden: 1000, KVHeads: 1, HeadDim: 250,
			BytesPerParam: 2, TensorParallel: 1, PeakFLOPS: flops, HBMBytesPerSec: 1e12, H2DBytesPerSec: 1e10,
			RemoteBytesPerSec: 1e9, MFU: 1, MBU: 1, StepOverheadSeconds: 1e-3})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	many := func(n int, w work) []work {
		ws := make([]work, n)
		for i := range ws {
			ws[i] = w
		}
		return ws
	}
	for _, tc := range []struct {
		name                      string
		flops                     float64
		ws                        []work
		steps                     int
		compute, memory, overhead float64
		wantWorkerSeconds         float64
	}{
		{
			// 1,000 new tokens: 2e12 + 4000 x (1000 x 1001 / 2) FLOPs; one
			// step reading the weights.
			name: "cold prompt, one token out", flops: 1e12, ws: []work{{prompt: 1000, out: 1}},
			steps: 1, compute: 2.002002, memory: 0.002, overhead: 0.001, wantWorkerSeconds: 2.003002,
		},
		{
			// Half the prompt cached: 1,000 tokens at positions 1000..1999,
			// 2e12 + 4000 x (1000 x 1000 + 1000 x 1001 / 2) FLOPs; the step
			// reads the 1,000 cached tokens' KV beside the weights.
			name: "half the prompt cached", flops: 1e12, ws: []work{{prompt: 2000, hits: 1000, out: 1}},
			steps: 1, compute: 2.006002, memory: 0.002001, overhead: 0.001, wantWorkerSeconds: 2.007002,
		},
		{
			// 512 requests decoding 100 tokens each, at most 256 a step: 200
			// steps, each reading the weights (0.4 s); KV per request 99 x 10
			// + 99 x 98 / 2 = 5,841 tokens (2.990592 ms over all 512). The
			// 109 tokens per request cost 2.18e11 + 4000 x 5995 FLOPs at
			// 1e15 FLOP/s: compute is not the limit.
			name: "decode-bound batch", flops: 1e15, ws: many(512, work{prompt: 10, out: 100}),
			steps: 200, compute: 512 * (2.18e11 + 4000*5995) / 1e15, memory: 0.4 + 0.002990592, overhead: 0.2,
			wantWorkerSeconds: 0.602990592,
		},
		{
			name: "nothing served", flops: 1e12, ws: []work{{prompt: 100, out: 0}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := engineBound(toy(tc.flops), 256, 8192, tc.ws)
			near := func(what string, got, want float64) {
				if math.Abs(got-want) > 1e-9*math.Max(1, want) {
					t.Errorf("%s %.12g, want %.12g", what, got, want)
				}
			}
			if b.Steps != tc.steps {
				t.Errorf("steps %d, want %d", b.Steps, tc.steps)
			}
			near("compute", b.ComputeSeconds, tc.compute)
			near("memory", b.MemorySeconds, tc.memory)
			near("overhead", b.OverheadSeconds, tc.overhead)
			near("worker seconds", b.WorkerSeconds, tc.wantWorkerSeconds)
		})
	}
}
