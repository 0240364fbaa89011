// Package timing is the simulator's cost model: how long one engine step
// takes on a given GPU for a given model. It is a roofline model — a step
// costs the larger of its compute time and its memory time, plus fixed
// per-step overheads — with constants taken from model cards and GPU
// datasheets (see Presets and docs/simulator.md for the sources).
//
//   - Prefill is compute-bound: 2·params FLOPs per new token, plus the
//     attention term 4·layers·hidden·context FLOPs per token, which grows
//     with how far into the sequence the token sits.
//   - Decode is memory-bound: every step reads all weights once, plus the
//     KV of every running sequence, so a step costs more as the batch grows.
//   - Loading KV from an external tier (LMCache L1 in CPU RAM) costs its
//     bytes over the host-to-device link instead of the prefill FLOPs.
package timing

import "fmt"

// Tier names an external KV tier a step may load from.
type Tier uint8

// External tiers.
const (
	// TierCPU is LMCache's L1 in the worker's host RAM (loaded over PCIe).
	TierCPU Tier = iota
	// TierRemote is a shared L2 reached over the network, then PCIe.
	TierRemote
)

// Chunk is the part of one request's prompt (or recomputed sequence)
// prefilled in a step: N new tokens starting at position Start.
type Chunk struct {
	Start, N int
}

// Batch describes the work of one engine step.
type Batch struct {
	Prefill []Chunk
	// DecodeContexts holds, for each sequence decoding one token this
	// step, the number of tokens already in its context.
	DecodeContexts []int
	// LoadTokens is the number of tokens whose KV is loaded from each
	// external tier during this step.
	LoadTokens [2]int
	// FetchSeconds is network time measured for remote loads instead of
	// modelled: tokens whose fetch was measured are counted under TierCPU
	// in LoadTokens (they still cross PCIe) and their network time here.
	FetchSeconds float64
}

// Model prices engine steps. The zero value is not useful; build it from a
// Preset.
type Model struct {
	Preset Preset
	// flopsPerSec and bytesPerSec are the effective per-GPU rates.
	flopsPerSec, bytesPerSec float64
}

// NewModel returns the cost model of a preset.
func NewModel(p Preset) (Model, error) {
	if err := p.Validate(); err != nil {
		return Model{}, err
	}
	return Model{
		Preset:      p,
		flopsPerSec: p.PeakFLOPS * p.MFU,
		bytesPerSec: p.HBMBytesPerSec * p.MBU,
	}, nil
}

// StepSeconds returns the modelled wall time of one step, in seconds.
// An empty batch costs nothing.
func (m Model) StepSeconds(b Batch) float64 {
	p := m.Preset
	newTokens := len(b.DecodeContexts)
	var attnTokenCtx float64 // Σ context length over every token computed
	var kvReadTokens float64 // tokens of KV read from HBM
	for _, c := range b.Prefill {
		newTokens += c.N
		// Token at position i attends to i+1 tokens: Σ_{i=s}^{s+n-1} (i+1).
		n, s := float64(c.N), float64(c.Start)
		attnTokenCtx += n*s + n*(n+1)/2
		kvReadTokens += s
	}
	for _, ctx := range b.DecodeContexts {
		attnTokenCtx += float64(ctx + 1)
		kvReadTokens += float64(ctx)
	}
	load := m.LoadSeconds(TierCPU, b.LoadTokens[TierCPU]) + m.LoadSeconds(TierRemote, b.LoadTokens[TierRemote]) + b.FetchSeconds
	if newTokens == 0 {
		return load
	}
	tp := float64(p.TensorParallel)
	flops := 2*p.Params*float64(newTokens) + 4*float64(p.Layers*p.Hidden)*attnTokenCtx
	bytes := p.WeightBytes() + kvReadTokens*float64(p.KVBytesPerToken())
	compute := flops / tp / m.flopsPerSec
	memory := m.ReadSeconds(bytes)
	step := max(compute, memory) + p.StepOverheadSeconds
	if p.TensorParallel > 1 {
		// Two all-reduces per layer per step (after attention and after MLP).
		step += 2 * float64(p.Layers) * p.AllReduceSeconds
	}
	return step + load
}

// ReadSeconds is the time to read bytes from HBM at the effective
// bandwidth, spread over the tensor-parallel ranks: a step's memory time.
func (m Model) ReadSeconds(bytes float64) float64 {
	return bytes / float64(m.Preset.TensorParallel) / m.bytesPerSec
}

// LoadSeconds returns the time to bring tokens' KV from an external tier
// into GPU memory. With tensor parallelism each rank loads its own shard
// over its own link, in parallel.
func (m Model) LoadSeconds(t Tier, tokens int) float64 {
	if tokens <= 0 {
		return 0
	}
	p := m.Preset
	bytes := float64(tokens) * float64(p.KVBytesPerToken()) / float64(p.TensorParallel)
	secs := bytes / p.H2DBytesPerSec
	if t == TierRemote {
		secs += bytes / p.RemoteBytesPerSec
	}
	return secs
}

// NetworkSeconds is the modelled network part of loading tokens' KV from
// the shared L2 (LoadSeconds(TierRemote) less the PCIe copy).
func (m Model) NetworkSeconds(tokens int) float64 {
	if tokens <= 0 {
		return 0
	}
	p := m.Preset
	return float64(tokens) * float64(p.KVBytesPerToken()) / float64(p.TensorParallel) / p.RemoteBytesPerSec
}

// PrefillSeconds is the time to prefill n tokens starting at start on an
// otherwise idle engine; handy for documentation and tests.
func (m Model) PrefillSeconds(start, n int) float64 {
	return m.StepSeconds(Batch{Prefill: []Chunk{{Start: start, N: n}}})
}

// PrefillComputeSeconds is the compute of prefilling n tokens from
// position start: their FLOPs, attention included, at the effective rate,
// without the step's memory floor and fixed overheads. A busy engine
// batches many requests' tokens into each step, so this is what those
// tokens add to it; a short prefill alone would cost a whole memory-bound
// step, which says nothing about what caching it saves.
func (m Model) PrefillComputeSeconds(start, n int) float64 {
	if n <= 0 {
		return 0
	}
	p := m.Preset
	nf, s := float64(n), float64(start)
	flops := 2*p.Params*nf + 4*float64(p.Layers*p.Hidden)*(nf*s+nf*(nf+1)/2)
	return flops / float64(p.TensorParallel) / m.flopsPerSec
}

// SavedShare is the share of the compute of prefilling a prompt's first n
// tokens that loading their KV from tier t saves instead (0..1): 1 less
// the load time over the prefill compute. It grows with n, as attention
// makes later tokens dearer to compute while each costs the same bytes to
// load.
func (m Model) SavedShare(t Tier, n int) float64 {
	compute := m.PrefillComputeSeconds(0, n)
	if compute <= 0 {
		return 0
	}
	return min(max(1-m.LoadSeconds(t, n)/compute, 0), 1)
}

// NumGPUBlocks is how many KV blocks of blockSize tokens fit in GPU memory
// after weights and the activation reserve, at the given memory utilisation
// (vLLM's --gpu-memory-utilization).
func (m Model) NumGPUBlocks(blockSize int, memUtil float64) int {
	p := m.Preset
	perGPU := p.GPUMemoryBytes*memUtil - p.WeightBytes()/float64(p.TensorParallel) - p.ActivationReserveBytes
	blockBytes := float64(blockSize) * float64(p.KVBytesPerToken()) / float64(p.TensorParallel)
	n := int(perGPU / blockBytes)
	return max(n, 0)
}

// String summarises the model for logs.
func (m Model) String() string {
	p := m.Preset
	return fmt.Sprintf("%s: %.1f µs/token prefill at context 0, %.2f ms decode step (batch 1), %.2f µs/token L1 load",
		p.Name, m.PrefillSeconds(0, 1000)/1000*1e6, m.StepSeconds(Batch{DecodeContexts: []int{1000}})*1e3,
		m.LoadSeconds(TierCPU, 1000)/1000*1e6)
}
