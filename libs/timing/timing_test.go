package timing

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func mustModel(t *testing.T, name string) Model {
	t.Helper()
	p, err := Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewModel(p)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestKVBytesPerToken(t *testing.T) {
	tests := []struct {
		preset string
		want   int
	}{
		// reference/vllm.md: 8B → 128 KiB/token, 70B → 320 KiB/token.
		{"llama-3.1-8b-h100", 128 << 10},
		{"llama-3.1-8b-l4", 128 << 10},
		{"llama-3.1-70b-tp8-h100", 320 << 10},
	}
	for _, tt := range tests {
		p, err := Lookup(tt.preset)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.KVBytesPerToken(); got != tt.want {
			t.Errorf("%s: KVBytesPerToken = %d, want %d", tt.preset, got, tt.want)
		}
	}
}

func TestPresetsShape(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			m := mustModel(t, name)
			if len(m.Preset.Sources) == 0 {
				t.Error("preset has no sources")
			}
			// Prefill per token grows with context (attention term).
			early := m.PrefillSeconds(0, 512)
			late := m.PrefillSeconds(32768, 512)
			if !(late > early) {
				t.Errorf("prefill of 512 tokens at ctx 32768 = %v, want > at ctx 0 = %v", late, early)
			}
			// Decode step grows with batch size.
			one := m.StepSeconds(Batch{DecodeContexts: []int{2048}})
			many := make([]int, 128)
			for i := range many {
				many[i] = 2048
			}
			big := m.StepSeconds(Batch{DecodeContexts: many})
			if !(big > one) {
				t.Errorf("decode step batch 128 = %v, want > batch 1 = %v", big, one)
			}
			// Loading KV from CPU beats recomputing it by at least 3× (LMCache's
			// published 3-10× on long contexts) for an 8K context.
			load := m.LoadSeconds(TierCPU, 8192)
			recompute := m.PrefillSeconds(0, 8192)
			if ratio := recompute / load; ratio < 3 {
				t.Errorf("prefill/L1-load ratio at 8K = %.1f, want ≥ 3", ratio)
			}
			if remote, cpu := m.LoadSeconds(TierRemote, 1000), m.LoadSeconds(TierCPU, 1000); !(remote > cpu) {
				t.Errorf("remote load %v, want slower than CPU load %v", remote, cpu)
			}
			if n := m.NumGPUBlocks(16, 0.9); n <= 0 {
				t.Errorf("NumGPUBlocks = %d, want > 0", n)
			}
			if got := m.StepSeconds(Batch{}); got != 0 {
				t.Errorf("empty step = %v, want 0", got)
			}
		})
	}
}

// TestPlausibleFigures pins the 8B/H100 preset to the range public vLLM
// measurements report, so a constant typo shows up here.
func TestPlausibleFigures(t *testing.T) {
	m := mustModel(t, "llama-3.1-8b-h100")
	tests := []struct {
		name     string
		got      float64
		min, max float64
	}{
		{"decode step batch 1 (s)", m.StepSeconds(Batch{DecodeContexts: []int{1024}}), 0.005, 0.012},
		{"prefill 2048 tokens (s)", m.PrefillSeconds(0, 2048), 0.04, 0.2},
		{"gpu blocks of 16 at 0.9", float64(m.NumGPUBlocks(16, 0.9)), 15000, 40000},
	}
	for _, tt := range tests {
		if tt.got < tt.min || tt.got > tt.max {
			t.Errorf("%s = %v, want in [%v, %v]", tt.name, tt.got, tt.min, tt.max)
		}
	}
}

func TestLookupUnknown(t *testing.T) {
	if _, err := Lookup("gpt-5-on-a-toaster"); !errors.Is(err, ErrUnknownPreset) {
		t.Fatalf("got %v, want ErrUnknownPreset", err)
	}
}

func TestValidate(t *testing.T) {
	p, _ := Lookup(DefaultPreset)
	p.MFU = 1.5
	if _, err := NewModel(p); err == nil {
		t.Fatal("MFU 1.5 accepted, want error")
	}
}

func TestWriteTableListsEveryPreset(t *testing.T) {
	var sb strings.Builder
	if err := WriteTable(&sb, 16, 0.9); err != nil {
		t.Fatal(err)
	}
	for _, n := range Names() {
		if !strings.Contains(sb.String(), n) {
			t.Errorf("table lacks %s:\n%s", n, sb.String())
		}
	}
}

// The shares below are worked by hand from the presets' constants: for the
// 8B model on an H100, 16.06 GFLOP per token plus attention at 445 TFLOP/s
// effective against 128 KiB of KV per token over 32 GB/s of PCIe (and
// 12.5 GB/s of network for the L2); the 70B model's ranks each load an
// eighth of its KV.
func TestSavedShare(t *testing.T) {
	for _, tc := range []struct {
		preset string
		tier   Tier
		n      int
		want   float64
	}{
		{"llama-3.1-8b-h100", TierCPU, 8192, 0.8999},
		{"llama-3.1-8b-h100", TierRemote, 8192, 0.6434},
		{"llama-3.1-8b-h100", TierCPU, 1024, 0.8883},
		{"llama-3.1-8b-h100", TierRemote, 1024, 0.6024},
		{"llama-3.1-70b-tp8-h100", TierCPU, 8192, 0.9733},
		{"llama-3.1-8b-h100", TierCPU, 0, 0},
	} {
		if got := mustModel(t, tc.preset).SavedShare(tc.tier, tc.n); math.Abs(got-tc.want) > 0.001 {
			t.Errorf("%s tier %d n=%d: SavedShare = %.4f, want %.4f", tc.preset, tc.tier, tc.n, got, tc.want)
		}
	}
}

// A slower tier never saves more, and a longer prefix never saves a
// smaller share: the credits kvaware derives from these keep its tiers in
// order.
func TestSavedShareOrdered(t *testing.T) {
	for _, name := range Names() {
		m := mustModel(t, name)
		prevCPU := 0.0
		for _, n := range []int{1, 16, 256, 1024, 8192, 65536, 131072} {
			cpu, remote := m.SavedShare(TierCPU, n), m.SavedShare(TierRemote, n)
			if remote > cpu || cpu > 1 || remote < 0 {
				t.Errorf("%s n=%d: shares cpu %.4f remote %.4f out of order", name, n, cpu, remote)
			}
			if cpu < prevCPU {
				t.Errorf("%s n=%d: cpu share %.4f fell from %.4f", name, n, cpu, prevCPU)
			}
			prevCPU = cpu
		}
	}
}
