package main

import (
	"testing"
	"time"
)

// TestSourceOneOnly: exactly one discovery source must be given; the
// Kubernetes one is not built here, as it needs a cluster.
func TestSourceOneOnly(t *testing.T) {
	for _, tc := range []struct {
		name    string
		flags   sourceFlags
		wantErr bool
	}{
		{name: "none", wantErr: true},
		{name: "static", flags: sourceFlags{workers: "http://127.0.0.1:1"}},
		{name: "dns", flags: sourceFlags{dnsName: "workers.invalid", dnsPort: 8000, dnsInterval: time.Second}},
		{name: "static and dns", flags: sourceFlags{workers: "http://127.0.0.1:1", dnsName: "workers.invalid"}, wantErr: true},
		{name: "static and k8s", flags: sourceFlags{workers: "http://127.0.0.1:1", k8sNamespace: "default"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := source(tc.flags, nil)
			if (err != nil) != tc.wantErr {
				t.Fatalf("source(%+v) error = %v, want error %v", tc.flags, err, tc.wantErr)
			}
			if err == nil && src == nil {
				t.Fatal("no source and no error")
			}
		})
	}
}
