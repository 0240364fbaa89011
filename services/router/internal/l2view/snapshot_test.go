package l2view

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseSnapshot(t *testing.T) {
	full := strings.Repeat("0", 48) + "00000000000000ff"
	for _, tc := range []struct {
		name, body string
		seq        int64
		keys       []uint64
		bad        bool
	}{
		{name: "empty", body: `{"seq":-1,"hashes":[]}`, seq: -1, keys: nil},
		{name: "64 hex", body: `{"seq":7,"hashes":["` + full + `"]}`, seq: 7, keys: []uint64{0xff}},
		{name: "low 64 bits are the key", body: `{"hashes":["ffffffffffffffff0000000000000001"],"seq":3}`, seq: 3, keys: []uint64{1}},
		{name: "short hex is a number", body: `{"seq":0,"hashes":["AbC"]}`, seq: 0, keys: []uint64{0xabc}},
		{name: "unknown fields skipped", body: `{"v":{"x":[1,2]},"seq":1,"hashes":["1"],"more":null}`, seq: 1, keys: []uint64{1}},
		{name: "no seq", body: `{"hashes":[]}`, bad: true},
		{name: "no hashes", body: `{"seq":1}`, bad: true},
		{name: "seq below -1", body: `{"seq":-2,"hashes":[]}`, bad: true},
		{name: "not hex", body: `{"seq":1,"hashes":["xyz"]}`, bad: true},
		{name: "too long", body: `{"seq":1,"hashes":["` + full + `0"]}`, bad: true},
		{name: "empty hash", body: `{"seq":1,"hashes":[""]}`, bad: true},
		{name: "hash not a string", body: `{"seq":1,"hashes":[1]}`, bad: true},
		{name: "truncated", body: `{"seq":1,"hashes":["1"`, bad: true},
		{name: "array", body: `[]`, bad: true},
		{name: "fractional seq", body: `{"seq":1.5,"hashes":[]}`, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parseSnapshot(strings.NewReader(tc.body))
			if tc.bad {
				if err == nil {
					t.Fatalf("accepted: %+v", s)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.seq != tc.seq || !slices.Equal(s.keys, tc.keys) {
				t.Errorf("got seq %d keys %x, want %d %x", s.seq, s.keys, tc.seq, tc.keys)
			}
		})
	}
}

func TestFetchSnapshot(t *testing.T) {
	f := newFakeServer(t)
	f.token = "s3cret"
	f.change(model, stored(hashOf(1), hashOf(2)))
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		cfg      Config
		wantErr  error
		anyError bool
	}{
		{name: "token from the file", cfg: Config{TokenFile: tokenFile}},
		{name: "no token", cfg: Config{}, anyError: true},
		{name: "token file missing", cfg: Config{TokenFile: filepath.Join(dir, "none")}, anyError: true},
		{name: "body over the limit", cfg: Config{TokenFile: tokenFile, SnapshotMaxBytes: 40}, wantErr: errTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newTestView(t, tc.cfg, f)
			s, err := v.fetchSnapshot(context.Background(), f.srv.URL, model)
			switch {
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
			case tc.anyError:
				if err == nil {
					t.Fatal("no error")
				}
			case err != nil:
				t.Fatal(err)
			case s.seq != 0 || len(s.keys) != 2:
				t.Errorf("snapshot %+v, want seq 0 and 2 keys", s)
			}
		})
	}
}

// FuzzSnapshot feeds arbitrary bodies to the snapshot decoder: a cache
// server (or whatever answers at its address) is not trusted to send
// well-formed JSON.
func FuzzSnapshot(f *testing.F) {
	for _, s := range []string{
		`{"seq":-1,"hashes":[]}`,
		`{"seq":12,"hashes":["` + strings.Repeat("ab", 32) + `","01"]}`,
		`{"x":[{"y":"z"}],"seq":1,"hashes":["f"]}`,
		`{"seq":1,"hashes":["1"`,
		`[1,2]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := parseSnapshot(strings.NewReader(string(body)))
		if err != nil {
			return
		}
		if s.seq < -1 {
			t.Fatalf("accepted seq %d", s.seq)
		}
		if len(s.keys) > len(body)/3 {
			t.Fatalf("%d keys from %d bytes", len(s.keys), len(body))
		}
	})
}
