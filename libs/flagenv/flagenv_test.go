package flagenv

import (
	"flag"
	"testing"
)

func TestApply(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	retries := fs.Int("max-retries", 2, "")
	port := fs.Int("port", 1, "")
	t.Setenv("APP_MAX_RETRIES", "5")
	if err := Apply(fs, "APP_"); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--port", "9"}); err != nil {
		t.Fatal(err)
	}
	if *retries != 5 || *port != 9 {
		t.Fatalf("got retries %d port %d, want 5 (env) and 9 (flag)", *retries, *port)
	}
	t.Setenv("APP_PORT", "not-a-number")
	if err := Apply(fs, "APP_"); err == nil {
		t.Fatal("bad value accepted")
	}
}
