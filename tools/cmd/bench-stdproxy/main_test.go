package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

func TestProxyRoundRobin(t *testing.T) {
	var targets []*url.URL
	for _, name := range []string{"a", "b"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, name)
		}))
		defer srv.Close()
		u, _ := url.Parse(srv.URL)
		targets = append(targets, u)
	}
	front := httptest.NewServer(newProxy(targets))
	defer front.Close()
	var got string
	for range 4 {
		resp, err := http.Get(front.URL + "/v1/completions")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		got += string(b)
	}
	if got != "abab" {
		t.Errorf("replies %q, want abab", got)
	}
}

func TestParseWorkers(t *testing.T) {
	if u, err := parseWorkers(" http://127.0.0.1:1,http://127.0.0.1:2,"); err != nil || len(u) != 2 {
		t.Errorf("parseWorkers = %v, %v; want 2 URLs", u, err)
	}
	for _, s := range []string{"", "127.0.0.1:1", "http://"} {
		if _, err := parseWorkers(s); err == nil {
			t.Errorf("parseWorkers(%q): got nil error", s)
		}
	}
}
