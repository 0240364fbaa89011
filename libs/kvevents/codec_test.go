package kvevents

import (
	"bytes"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/payloads from the handcrafted payloads")

// roundTripBatches covers both hash kinds and nil and set optional fields.
func roundTripBatches() map[string]Batch {
	bh := BytesHash(bytes.Repeat([]byte{0xab}, 32))
	return map[string]Batch{
		"empty":           {TS: 1.5},
		"empty with rank": {TS: 2, DataParallelRank: i64(0)},
		"int hashes minimal": {TS: 1789095808.8378847, Events: []Event{
			BlockStored{
				BlockHashes: []BlockHash{IntHash(15760518052499183552), IntHash(7)},
				TokenIDs:    seqTokens(100, 32),
				BlockSize:   16,
			},
		}},
		"int hashes all fields": {TS: 3, DataParallelRank: i64(3), Events: []Event{
			BlockStored{
				BlockHashes:              []BlockHash{IntHash(math.MaxUint64)},
				ParentBlockHash:          hp(IntHash(1)),
				TokenIDs:                 seqTokens(0, 4),
				BlockSize:                4,
				LoRAID:                   i64(2),
				Medium:                   "GPU",
				LoRAName:                 "sql-lora",
				ExtraKeys:                newMP().arr(1).arr(2).s("sql-lora").bin([]byte("salt")).bytes(),
				GroupIdx:                 i64(1),
				KVCacheSpecKind:          "sliding_window",
				KVCacheSpecSlidingWindow: i64(4096),
			},
			BlockRemoved{BlockHashes: []BlockHash{IntHash(1), IntHash(2)}, Medium: "CPU", GroupIdx: i64(0)},
			AllBlocksCleared{},
		}},
		"bytes hashes": {TS: 4, Events: []Event{
			BlockStored{
				BlockHashes:     []BlockHash{bh, BytesHash([]byte{1, 2, 3})},
				ParentBlockHash: hp(BytesHash(bytes.Repeat([]byte{0x01}, 32))),
				TokenIDs:        []uint32{math.MaxUint32, 0},
				BlockSize:       1,
				Medium:          "GPU",
			},
			BlockRemoved{BlockHashes: []BlockHash{bh}},
		}},
		"only a late optional field": {TS: 5, Events: []Event{
			BlockStored{BlockHashes: []BlockHash{IntHash(9)}, TokenIDs: []uint32{1}, BlockSize: 1, KVCacheSpecSlidingWindow: i64(8)},
		}},
	}
}

func TestRoundTrip(t *testing.T) {
	for name, b := range roundTripBatches() {
		for _, enc := range []Encoding{Positional, MapEncoding} {
			t.Run(name+"/"+enc.String(), func(t *testing.T) {
				got, err := DecodeBatch(mustEncode(t, b, enc))
				if err != nil {
					t.Fatalf("DecodeBatch: %v", err)
				}
				if !batchEqual(got, b) {
					t.Errorf("got %+v, want %+v", got, b)
				}
			})
		}
	}
}

func TestEncodeAcceptsPointers(t *testing.T) {
	values := Batch{TS: 1, Events: []Event{
		BlockStored{BlockHashes: []BlockHash{IntHash(1)}, TokenIDs: []uint32{1}, BlockSize: 1},
		BlockRemoved{BlockHashes: []BlockHash{IntHash(1)}},
		AllBlocksCleared{},
	}}
	pointers := Batch{TS: 1, Events: []Event{
		&BlockStored{BlockHashes: []BlockHash{IntHash(1)}, TokenIDs: []uint32{1}, BlockSize: 1},
		&BlockRemoved{BlockHashes: []BlockHash{IntHash(1)}},
		&AllBlocksCleared{},
	}}
	for _, enc := range []Encoding{Positional, MapEncoding} {
		got, want := mustEncode(t, pointers, enc), mustEncode(t, values, enc)
		if !bytes.Equal(got, want) {
			t.Errorf("%v: got %x, want %x", enc, got, want)
		}
	}
}

func TestEncodeErrors(t *testing.T) {
	tests := []struct {
		name string
		b    Batch
		enc  Encoding
	}{
		{"nil event", Batch{Events: []Event{nil}}, Positional},
		{"nil pointer", Batch{Events: []Event{(*BlockRemoved)(nil)}}, MapEncoding},
		{"bad extra keys", Batch{Events: []Event{BlockStored{ExtraKeys: []byte{0x92, 0x01}}}}, Positional},
		{"two extra values", Batch{Events: []Event{BlockStored{ExtraKeys: []byte{0x01, 0x02}}}}, MapEncoding},
		{"unknown encoding", Batch{}, Encoding(7)},
		{"negative block size", Batch{Events: []Event{BlockStored{BlockSize: -1}}}, Positional},
		{"extra keys nested too deep", Batch{Events: []Event{BlockStored{ExtraKeys: append(bytes.Repeat([]byte{0x91}, maxDepth), 0xc0)}}}, MapEncoding},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := EncodeBatch(tt.b, tt.enc); err == nil {
				t.Errorf("got nil error, want one")
			}
		})
	}
}

// golden is a payload written down as vLLM's msgspec encoder emits it.
type golden struct {
	name string
	data []byte
	want Batch
	// exact is the encoding whose EncodeBatch output must equal data byte for
	// byte, or -1 when data is not canonical (extra fields, odd codes).
	exact Encoding
}

func goldens() []golden {
	hash32 := bytes.Repeat([]byte{0x5a}, 32)
	return []golden{
		{
			// vLLM 0.8/0.9: BlockStored ends at lora_id, no medium, no rank.
			name: "positional_v0.8_missing_trailing",
			data: newMP().arr(2).f(10.25).arr(2).
				arr(6).s("BlockStored").arr(2).u(11).u(22).null().tokens(1, 2, 3, 4).u(2).null().
				arr(2).s("BlockRemoved").arr(1).u(11).
				bytes(),
			want: Batch{TS: 10.25, Events: []Event{
				BlockStored{BlockHashes: []BlockHash{IntHash(11), IntHash(22)}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 2},
				BlockRemoved{BlockHashes: []BlockHash{IntHash(11)}},
			}},
			exact: -1,
		},
		{
			// vLLM 0.10 to 0.25: medium and lora_name, rank in the envelope.
			name: "positional_v0.11_with_rank",
			data: newMP().arr(3).f(1.5).arr(3).
				arr(8).s("BlockStored").arr(1).u(33).u(22).tokens(5, 6).u(2).null().s("GPU").null().
				arr(3).s("BlockRemoved").arr(2).u(33).u(22).s("GPU").
				arr(1).s("AllBlocksCleared").
				u(0).bytes(),
			want: Batch{TS: 1.5, DataParallelRank: i64(0), Events: []Event{
				BlockStored{BlockHashes: []BlockHash{IntHash(33)}, ParentBlockHash: hp(IntHash(22)), TokenIDs: []uint32{5, 6}, BlockSize: 2, Medium: "GPU"},
				BlockRemoved{BlockHashes: []BlockHash{IntHash(33), IntHash(22)}, Medium: "GPU"},
				AllBlocksCleared{},
			}},
			exact: -1,
		},
		{
			// A layout that ends at group_idx.
			name: "positional_group_idx_without_extra_keys",
			data: newMP().arr(3).f(2).arr(1).
				arr(10).s("BlockStored").arr(1).u(1).null().tokens(9).u(1).null().s("CPU").s("lora-a").null().u(2).
				u(1).bytes(),
			want: Batch{TS: 2, DataParallelRank: i64(1), Events: []Event{
				BlockStored{BlockHashes: []BlockHash{IntHash(1)}, TokenIDs: []uint32{9}, BlockSize: 1, Medium: "CPU", LoRAName: "lora-a", GroupIdx: i64(2)},
			}},
			exact: -1,
		},
		{
			// The latest positional layout: msgspec writes every field of an
			// array_like struct, nil where unset (msgspec/msgspec#720).
			name: "positional_latest_all_fields",
			data: newMP().arr(3).f(2.5).arr(3).
				arr(12).s("BlockStored").arr(2).u(math.MaxUint64).u(3).u(2).tokens(1, 2, 3, 4).u(2).null().s("GPU").null().
				null().u(0).s("full_attention").null().
				arr(4).s("BlockRemoved").arr(1).u(2).s("GPU").null().
				arr(1).s("AllBlocksCleared").
				null().bytes(),
			want: Batch{TS: 2.5, Events: []Event{
				BlockStored{BlockHashes: []BlockHash{IntHash(math.MaxUint64), IntHash(3)}, ParentBlockHash: hp(IntHash(2)),
					TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 2, Medium: "GPU", GroupIdx: i64(0), KVCacheSpecKind: "full_attention"},
				BlockRemoved{BlockHashes: []BlockHash{IntHash(2)}, Medium: "GPU"},
				AllBlocksCleared{},
			}},
			exact: Positional,
		},
		{
			name: "positional_extra_unknown_trailing",
			data: newMP().arr(4).f(3).arr(3).
				arr(14).s("BlockStored").arr(1).u(7).null().tokens(1).u(1).null().s("GPU").null().
				arr(1).null().u(0).s("full_attention").u(128).s("future").mapn(1).s("x").arr(2).u(1).u(2).
				arr(5).s("BlockRemoved").arr(1).u(7).s("GPU").u(0).s("unknown").
				arr(2).s("AllBlocksCleared").s("junk").
				u(0).s("envelope-extra").bytes(),
			want: Batch{TS: 3, DataParallelRank: i64(0), Events: []Event{
				BlockStored{BlockHashes: []BlockHash{IntHash(7)}, TokenIDs: []uint32{1}, BlockSize: 1, Medium: "GPU",
					ExtraKeys: []byte{0x91, 0xc0}, GroupIdx: i64(0), KVCacheSpecKind: "full_attention", KVCacheSpecSlidingWindow: i64(128)},
				BlockRemoved{BlockHashes: []BlockHash{IntHash(7)}, Medium: "GPU", GroupIdx: i64(0)},
				AllBlocksCleared{},
			}},
			exact: -1,
		},
		{
			// vLLM v0.26 as captured in volcano-sh/kthena#1535.
			name: "map_v0.26",
			data: newMP().arr(3).f(1789095808.8378847).arr(1).
				mapn(11).s("type").s("BlockStored").
				s("block_hashes").arr(1).u(15760518052499183552).
				s("parent_block_hash").null().
				s("token_ids").tokens(151644, 872, 198, 9064, 374, 279, 6722, 315, 5616, 30, 151645, 198, 151644, 77091, 198, 151667).
				s("block_size").u(16).s("lora_id").null().s("medium").s("GPU").s("lora_name").null().
				s("extra_keys").arr(1).null().s("group_idx").u(0).s("kv_cache_spec_kind").s("full_attention").
				u(0).bytes(),
			want: Batch{TS: 1789095808.8378847, DataParallelRank: i64(0), Events: []Event{
				BlockStored{
					BlockHashes: []BlockHash{IntHash(15760518052499183552)},
					TokenIDs:    []uint32{151644, 872, 198, 9064, 374, 279, 6722, 315, 5616, 30, 151645, 198, 151644, 77091, 198, 151667},
					BlockSize:   16, Medium: "GPU", ExtraKeys: []byte{0x91, 0xc0}, GroupIdx: i64(0), KVCacheSpecKind: "full_attention",
				},
			}},
			exact: MapEncoding,
		},
		{
			name: "map_unknown_keys_any_order",
			data: newMP().arr(3).f(4).arr(3).
				mapn(6).s("future").mapn(1).s("k").arr(1).u(1).s("block_size").u(1).s("token_ids").tokens(8).
				s("type").s("BlockStored").s("block_hashes").arr(1).u(5).s("medium").s("GPU").
				mapn(4).s("block_hashes").arr(1).u(5).s("type").s("BlockRemoved").s("token_offset").u(3).s("medium").null().
				mapn(2).s("type").s("AllBlocksCleared").s("reason").s("sleep").
				u(2).bytes(),
			want: Batch{TS: 4, DataParallelRank: i64(2), Events: []Event{
				BlockStored{BlockHashes: []BlockHash{IntHash(5)}, TokenIDs: []uint32{8}, BlockSize: 1, Medium: "GPU"},
				BlockRemoved{BlockHashes: []BlockHash{IntHash(5)}},
				AllBlocksCleared{},
			}},
			exact: -1,
		},
		{
			// Older vLLM sent Python's hash() as a signed int64.
			name: "negative_int_hashes",
			data: newMP().arr(2).f(5).arr(2).
				arr(8).s("BlockStored").arr(3).i(-1).i(-100).i64code(math.MinInt64).i(-2).tokens(1, 2, 3).u(1).null().null().null().
				arr(3).s("BlockRemoved").arr(2).i64code(-1).u64code(42).null().
				bytes(),
			want: Batch{TS: 5, Events: []Event{
				BlockStored{BlockHashes: []BlockHash{IntHash(math.MaxUint64), IntHash(math.MaxUint64 - 99), IntHash(1 << 63)},
					ParentBlockHash: hp(IntHash(math.MaxUint64 - 1)), TokenIDs: []uint32{1, 2, 3}, BlockSize: 1},
				BlockRemoved{BlockHashes: []BlockHash{IntHash(math.MaxUint64), IntHash(42)}},
			}},
			exact: -1,
		},
		{
			// VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0: raw 32-byte digests.
			name: "bin_hashes",
			data: newMP().arr(3).f(6).arr(1).
				mapn(8).s("type").s("BlockRemoved").s("block_hashes").arr(1).bin(hash32).s("medium").s("GPU").
				s("group_idx").u(1).s("a").u(1).s("b").u(2).s("c").u(3).s("d").u(4).
				u(0).bytes(),
			want: Batch{TS: 6, DataParallelRank: i64(0), Events: []Event{
				BlockRemoved{BlockHashes: []BlockHash{BytesHash(hash32)}, Medium: "GPU", GroupIdx: i64(1)},
			}},
			exact: -1,
		},
		{
			name:  "envelope_without_rank",
			data:  newMP().arr(2).f(7).arr(0).bytes(),
			want:  Batch{TS: 7},
			exact: -1,
		},
		{
			name:  "envelope_with_nil_rank",
			data:  newMP().arr(3).f(7).arr(0).null().bytes(),
			want:  Batch{TS: 7},
			exact: MapEncoding,
		},
		{
			name:  "envelope_with_nil_rank_and_float32_ts",
			data:  newMP().arr(3).f32(0.5).arr(0).null().bytes(),
			want:  Batch{TS: 0.5},
			exact: -1,
		},
		{
			name: "envelope_as_map",
			data: newMP().mapn(4).s("events").arr(1).arr(1).s("AllBlocksCleared").
				s("data_parallel_rank").u(1).s("ts").u(8).s("extra").arr(0).bytes(),
			want:  Batch{TS: 8, DataParallelRank: i64(1), Events: []Event{AllBlocksCleared{}}},
			exact: -1,
		},
		{
			name: "unknown_event_types_skipped",
			data: newMP().arr(2).f(9).arr(4).
				arr(3).s("BlockUpdated").u(1).arr(1).u(2).
				mapn(2).s("type").s("BlockMoved").s("to").s("CPU").
				arr(1).s("AllBlocksCleared").
				mapn(1).s("type").s("Future").
				bytes(),
			want:  Batch{TS: 9, Events: []Event{AllBlocksCleared{}}},
			exact: -1,
		},
	}
}

func TestGoldenPayloads(t *testing.T) {
	for _, g := range goldens() {
		t.Run(g.name, func(t *testing.T) {
			path := filepath.Join("testdata", "payloads", g.name+".msgpack")
			if *update {
				if err := os.WriteFile(path, g.data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			file, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if !bytes.Equal(file, g.data) {
				t.Fatalf("%s is stale: got %x, want %x (run with -update)", path, file, g.data)
			}
			got, err := DecodeBatch(g.data)
			if err != nil {
				t.Fatalf("DecodeBatch: %v", err)
			}
			if !batchEqual(got, g.want) {
				t.Fatalf("got %+v, want %+v", got, g.want)
			}
			if g.exact >= 0 {
				if enc := mustEncode(t, g.want, g.exact); !bytes.Equal(enc, g.data) {
					t.Errorf("EncodeBatch: got %x, want %x", enc, g.data)
				}
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	deep := newMP().arr(2).f(1).arr(1).arr(9).s("BlockStored").arr(0).null().arr(0).u(1).null().null().null()
	for range 1000 {
		deep.arr(1)
	}
	deep.null()
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "unexpected end"},
		{"not an array", newMP().s("x").bytes(), "want array"},
		{"short envelope", newMP().arr(1).f(1).bytes(), "at least 2"},
		{"ts as string", newMP().arr(2).s("1").arr(0).bytes(), "ts"},
		{"events as map", newMP().arr(2).f(1).mapn(0).bytes(), "events"},
		{"empty event", newMP().arr(2).f(1).arr(1).arr(0).bytes(), "empty event"},
		{"event tag not a string", newMP().arr(2).f(1).arr(1).arr(1).u(1).bytes(), "type"},
		{"event as int", newMP().arr(2).f(1).arr(1).u(1).bytes(), "want array"},
		{"stored without token_ids", newMP().arr(2).f(1).arr(1).arr(3).s("BlockStored").arr(0).null().bytes(), "without token_ids, block_size"},
		{"removed without hashes", newMP().arr(2).f(1).arr(1).arr(1).s("BlockRemoved").bytes(), "without block_hashes"},
		{"map event without type", newMP().arr(2).f(1).arr(1).mapn(1).s("block_hashes").arr(0).bytes(), "without type"},
		{"map type not a string", newMP().arr(2).f(1).arr(1).mapn(1).s("type").u(3).bytes(), "type"},
		{"negative token", newMP().arr(2).f(1).arr(1).arr(5).s("BlockStored").arr(0).null().arr(1).i(-1).u(1).bytes(), "out of range"},
		{"token above uint32", newMP().arr(2).f(1).arr(1).arr(5).s("BlockStored").arr(0).null().arr(1).u(1 << 32).u(1).bytes(), "out of range"},
		{"hash as string", newMP().arr(2).f(1).arr(1).arr(2).s("BlockRemoved").arr(1).s("abc").bytes(), "hash"},
		{"block size nil", newMP().arr(2).f(1).arr(1).arr(5).s("BlockStored").arr(0).null().arr(0).null().bytes(), "block_size"},
		{"lora_id above int64", newMP().arr(2).f(1).arr(1).arr(6).s("BlockStored").arr(0).null().arr(0).u(1).u(math.MaxUint64).bytes(), "out of range"},
		{"huge array claim", newMP().arr(2).f(1).raw([]byte{0xdd, 0x7f, 0xff, 0xff, 0xff}).bytes(), "remaining"},
		{"huge string claim", newMP().arr(2).f(1).arr(1).arr(1).raw([]byte{0xdb, 0xff, 0xff, 0xff, 0xff}).bytes(), "remaining"},
		{"huge bin hash claim", newMP().arr(2).f(1).arr(1).arr(2).s("BlockRemoved").arr(1).raw([]byte{0xc6, 0xff, 0xff, 0xff, 0xff}).bytes(), "remaining"},
		{"huge map claim", newMP().arr(2).f(1).arr(1).raw([]byte{0xdf, 0xff, 0xff, 0xff, 0xff}).bytes(), "remaining"},
		{"deep nesting", deep.bytes(), "nested"},
		{"trailing bytes", newMP().arr(2).f(1).arr(0).u(1).bytes(), "after the batch"},
		{"truncated", newMP().arr(2).f(1).arr(1).arr(2).s("BlockRemoved").bytes(), "end of payload"},
		{"reserved code", newMP().arr(2).f(1).arr(1).arr(2).s("X").raw([]byte{0xc1}).bytes(), "0xc1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeBatch(tt.data)
			if err == nil {
				t.Fatalf("got nil error, want one containing %q", tt.want)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("got %v, want it to wrap ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestBlockHash(t *testing.T) {
	tests := []struct {
		name      string
		h         BlockHash
		wantInt   bool
		wantU64   uint64
		wantBytes []byte
		wantStr   string
	}{
		{"int", IntHash(258), true, 258, []byte{0, 0, 0, 0, 0, 0, 1, 2}, "258"},
		{"max int", IntHash(math.MaxUint64), true, math.MaxUint64, bytes.Repeat([]byte{0xff}, 8), "18446744073709551615"},
		{"32 bytes", BytesHash(append(bytes.Repeat([]byte{0}, 24), 0, 0, 0, 0, 0, 0, 1, 2)), false, 258,
			append(bytes.Repeat([]byte{0}, 24), 0, 0, 0, 0, 0, 0, 1, 2), "0x" + strings.Repeat("00", 30) + "0102"},
		{"short bytes", BytesHash([]byte{1, 2}), false, 258, []byte{1, 2}, "0x0102"},
		{"zero value", BlockHash{}, false, 0, []byte{}, "0x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.h.IsInt(); got != tt.wantInt {
				t.Errorf("IsInt: got %v, want %v", got, tt.wantInt)
			}
			if got := tt.h.Uint64(); got != tt.wantU64 {
				t.Errorf("Uint64: got %d, want %d", got, tt.wantU64)
			}
			if got := tt.h.Bytes(); !bytes.Equal(got, tt.wantBytes) {
				t.Errorf("Bytes: got %x, want %x", got, tt.wantBytes)
			}
			if got := tt.h.String(); got != tt.wantStr {
				t.Errorf("String: got %q, want %q", got, tt.wantStr)
			}
		})
	}
	if IntHash(258) == BytesHash([]byte{0, 0, 0, 0, 0, 0, 1, 2}) {
		t.Errorf("an int hash equals a bytes hash with the same 8 bytes")
	}
	m := map[BlockHash]int{BytesHash([]byte{1}): 1, IntHash(1): 2}
	if got := m[BytesHash([]byte{1})]; got != 1 {
		t.Errorf("map lookup: got %d, want 1", got)
	}
}
