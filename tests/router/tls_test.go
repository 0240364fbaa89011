package router

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/warmpath/warmpath/libs/testcert"
	"github.com/warmpath/warmpath/libs/testwait"
)

// TestTLSAndKeysRotate: the router serves clients over TLS with the
// official openai-go client, accepts each key of its key file and no
// other, and takes a renewed certificate and a rotated key file (both
// swapped in as the kubelet swaps a Secret's files) without a restart.
func TestTLSAndKeysRotate(t *testing.T) {
	w := startWorker(t)
	dir := t.TempDir()
	certFile, keyFile, apiKeyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "keys")
	swap := func(path string, content []byte) {
		t.Helper()
		if err := os.WriteFile(path+".new", content, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}
	roots := x509.NewCertPool()
	install := func(name string) {
		t.Helper()
		f := testcert.Write(t, name)
		for src, dst := range map[string]string{f.Cert: certFile, f.Key: keyFile} {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			swap(dst, b)
		}
		ca, err := os.ReadFile(f.CA)
		if err != nil {
			t.Fatal(err)
		}
		roots.AppendCertsFromPEM(ca)
	}
	install("router-first")
	swap(apiKeyFile, []byte("key-a\nkey-b\n"))
	// The router's readiness is read over TLS too, trusting the CAs
	// installed (roots grows as certificates are).
	tlsClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	r := startRouterOn(t, "https", tlsClient, []*worker{w}, "--tls-cert-file", certFile, "--tls-key-file", keyFile, "--api-key-file", apiKeyFile)

	// complete sends one completion with key over a new connection and
	// returns the server certificate's name and the error.
	complete := func(key string) (string, error) {
		t.Helper()
		var served string
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12,
			VerifyConnection: func(cs tls.ConnectionState) error {
				served = cs.PeerCertificates[0].Subject.CommonName
				return nil
			}}}
		defer tr.CloseIdleConnections()
		c := openai.NewClient(option.WithBaseURL(r.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0),
			option.WithHTTPClient(&http.Client{Transport: tr, Timeout: 10 * time.Second}))
		_, err := c.Completions.New(context.Background(), openai.CompletionNewParams{
			Model: openai.CompletionNewParamsModel(simModel), MaxTokens: openai.Int(1),
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("over TLS")},
		})
		return served, err
	}
	status := func(err error) int {
		var apiErr *openai.Error
		if errors.As(err, &apiErr) {
			return apiErr.StatusCode
		}
		return 0
	}
	check := func(step, key, wantCert string, wantStatus int) {
		t.Helper()
		served, err := complete(key)
		if got := status(err); (wantStatus == 200 && err != nil) || (wantStatus != 200 && got != wantStatus) {
			t.Errorf("%s, key %q: %v (status %d), want %d", step, key, err, got, wantStatus)
		}
		if served != wantCert {
			t.Errorf("%s: served certificate %q, want %q", step, served, wantCert)
		}
	}
	check("at start", "key-a", "router-first", 200)
	check("at start", "key-b", "router-first", 200)
	check("at start", "key-c", "router-first", 401)

	install("router-renewed")
	swap(apiKeyFile, []byte("key-c\n"))
	// The router rechecks both files once a second.
	testwait.For(t, 5*time.Second, "the renewed certificate and rotated keys", func() bool {
		served, err := complete("key-c")
		return err == nil && served == "router-renewed"
	})
	check("rotated", "key-c", "router-renewed", 200)
	check("rotated", "key-a", "router-renewed", 401)

	// Plain HTTP gets no answer: the port speaks TLS only.
	resp, err := http.Get("http" + r.url[len("https"):] + "/health")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP answered 200 on the TLS port")
		}
	}
}
