package routerbench

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestRenderNginxConf(t *testing.T) {
	c := NginxConfig{Workers: "auto", Upstreams: []string{"127.0.0.1:9001", "127.0.0.1:9002"}, Dir: "/tmp/bench"}
	got, err := renderNginxConf(c, "127.0.0.1:9000")
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "nginx.conf.golden")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("nginx.conf differs from %s (go test -update rewrites it):\n%s", golden, got)
	}
	again, _ := renderNginxConf(c, "127.0.0.1:9000")
	if string(again) != string(got) {
		t.Error("rendering twice gave different configs")
	}
}
