package timing

import (
	"errors"
	"fmt"
	"sort"
)

// Preset holds a model architecture, the GPU it runs on and the efficiency
// it reaches there. Every constant is documented with its source in
// docs/simulator.md.
type Preset struct {
	Name string
	// Model architecture (model card / config.json).
	Params  float64 // parameter count
	Layers  int
	Hidden  int // hidden size = attention heads × head dim
	KVHeads int
	HeadDim int
	// BytesPerParam is the weight precision (2 for bf16).
	BytesPerParam float64
	// Hardware (per GPU).
	TensorParallel int
	GPUMemoryBytes float64
	PeakFLOPS      float64 // dense bf16 FLOP/s
	HBMBytesPerSec float64
	// H2DBytesPerSec is the effective host-to-device bandwidth LMCache gets
	// when loading KV from CPU RAM.
	H2DBytesPerSec float64
	// RemoteBytesPerSec is the effective bandwidth to a shared L2 over the
	// network (added to the H2D time for remote hits).
	RemoteBytesPerSec float64
	// Achieved fractions of peak.
	MFU float64 // model FLOPs utilisation during prefill
	MBU float64 // memory bandwidth utilisation during decode
	// Fixed costs.
	StepOverheadSeconds    float64 // scheduling, sampling, kernel launch per step
	AllReduceSeconds       float64 // latency of one all-reduce at TP>1
	ActivationReserveBytes float64 // per-GPU memory vLLM keeps for activations
	// Sources lists where the constants come from.
	Sources []string
}

// KVBytesPerToken is the bf16 KV size of one token across all ranks:
// 2 (K and V) × layers × kv heads × head dim × 2 bytes.
func (p Preset) KVBytesPerToken() int { return 2 * p.Layers * p.KVHeads * p.HeadDim * 2 }

// WeightBytes is the size of all weights.
func (p Preset) WeightBytes() float64 { return p.Params * p.BytesPerParam }

// Validate reports a preset whose constants cannot price a step.
func (p Preset) Validate() error {
	switch {
	case p.Params <= 0, p.Layers <= 0, p.Hidden <= 0, p.KVHeads <= 0, p.HeadDim <= 0, p.BytesPerParam <= 0:
		return fmt.Errorf("timing: preset %q: model architecture must be positive", p.Name)
	case p.TensorParallel <= 0:
		return fmt.Errorf("timing: preset %q: tensor parallel size must be positive", p.Name)
	case p.PeakFLOPS <= 0, p.HBMBytesPerSec <= 0, p.H2DBytesPerSec <= 0, p.RemoteBytesPerSec <= 0:
		return fmt.Errorf("timing: preset %q: hardware rates must be positive", p.Name)
	case p.MFU <= 0 || p.MFU > 1, p.MBU <= 0 || p.MBU > 1:
		return fmt.Errorf("timing: preset %q: utilisation must be in (0, 1]", p.Name)
	}
	return nil
}

const (
	giB = 1 << 30
	gB  = 1e9
	tB  = 1e12
)

// Hardware constants (datasheets, see docs/simulator.md).
const (
	h100PeakBF16 = 989.4e12 // H100 SXM5, dense BF16 tensor core
	h100HBM      = 3.35 * tB
	h100Mem      = 80 * gB
	l4PeakBF16   = 121e12 // L4, dense BF16 tensor core
	l4GDDR       = 300 * gB
	l4Mem        = 24 * gB
	pcie5x16     = 64 * gB // per direction
	pcie4x16     = 32 * gB
)

var llama8B = Preset{
	Params: 8.03e9, Layers: 32, Hidden: 4096, KVHeads: 8, HeadDim: 128, BytesPerParam: 2,
}

var llama70B = Preset{
	Params: 70.6e9, Layers: 80, Hidden: 8192, KVHeads: 8, HeadDim: 128, BytesPerParam: 2,
}

// presets are keyed by name; see Lookup.
var presets = map[string]Preset{
	"llama-3.1-8b-h100": with(llama8B, Preset{
		Name: "llama-3.1-8b-h100", TensorParallel: 1,
		GPUMemoryBytes: h100Mem, PeakFLOPS: h100PeakBF16, HBMBytesPerSec: h100HBM,
		H2DBytesPerSec: 0.5 * pcie5x16, RemoteBytesPerSec: 12.5 * gB,
		MFU: 0.45, MBU: 0.75, StepOverheadSeconds: 0.0008, ActivationReserveBytes: 4 * giB,
		Sources: []string{
			"meta-llama/Llama-3.1-8B config.json (32 layers, hidden 4096, 8 KV heads, head dim 128)",
			"NVIDIA H100 Tensor Core GPU datasheet (SXM5: 989 TFLOPS dense BF16, 3.35 TB/s HBM3, 80 GB, PCIe Gen5 x16)",
		},
	}),
	"llama-3.1-70b-tp8-h100": with(llama70B, Preset{
		Name: "llama-3.1-70b-tp8-h100", TensorParallel: 8,
		GPUMemoryBytes: h100Mem, PeakFLOPS: h100PeakBF16, HBMBytesPerSec: h100HBM,
		H2DBytesPerSec: 0.5 * pcie5x16, RemoteBytesPerSec: 12.5 * gB,
		MFU: 0.40, MBU: 0.70, StepOverheadSeconds: 0.0012, AllReduceSeconds: 12e-6,
		ActivationReserveBytes: 6 * giB,
		Sources: []string{
			"meta-llama/Llama-3.1-70B config.json (80 layers, hidden 8192, 8 KV heads, head dim 128)",
			"NVIDIA H100 Tensor Core GPU datasheet (SXM5: 989 TFLOPS dense BF16, 3.35 TB/s HBM3, 80 GB)",
			"NVLink 4 all-reduce latency on 8×H100 (NCCL tests, ~10-15 µs for small messages)",
		},
	}),
	"llama-3.1-8b-l4": with(llama8B, Preset{
		Name: "llama-3.1-8b-l4", TensorParallel: 1,
		GPUMemoryBytes: l4Mem, PeakFLOPS: l4PeakBF16, HBMBytesPerSec: l4GDDR,
		H2DBytesPerSec: 0.5 * pcie4x16, RemoteBytesPerSec: 3 * gB,
		MFU: 0.50, MBU: 0.75, StepOverheadSeconds: 0.0008, ActivationReserveBytes: 2 * giB,
		Sources: []string{
			"meta-llama/Llama-3.1-8B config.json",
			"NVIDIA L4 datasheet (121 TFLOPS dense BF16, 300 GB/s GDDR6, 24 GB, PCIe Gen4 x16)",
		},
	}),
}

// with fills hw's architecture fields from arch.
func with(arch, hw Preset) Preset {
	hw.Params, hw.Layers, hw.Hidden = arch.Params, arch.Layers, arch.Hidden
	hw.KVHeads, hw.HeadDim, hw.BytesPerParam = arch.KVHeads, arch.HeadDim, arch.BytesPerParam
	return hw
}

// DefaultPreset is the preset used when none is named.
const DefaultPreset = "llama-3.1-8b-h100"

// ErrUnknownPreset is returned by Lookup for names not in Names().
var ErrUnknownPreset = errors.New("timing: unknown preset")

// Lookup returns the named preset.
func Lookup(name string) (Preset, error) {
	p, ok := presets[name]
	if !ok {
		return Preset{}, fmt.Errorf("%w %q (known: %v)", ErrUnknownPreset, name, Names())
	}
	p.Sources = append([]string(nil), p.Sources...)
	return p, nil
}

// Names lists the presets in sorted order.
func Names() []string {
	out := make([]string, 0, len(presets))
	for n := range presets {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
