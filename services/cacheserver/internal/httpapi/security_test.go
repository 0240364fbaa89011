package httpapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmpath/warmpath/libs/httpserve"
	"github.com/warmpath/warmpath/libs/openai"
	"github.com/warmpath/warmpath/libs/testcert"
	"github.com/warmpath/warmpath/libs/tlsconf"
	"github.com/warmpath/warmpath/services/cacheserver/internal/metrics"
	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
	"github.com/warmpath/warmpath/services/cacheserver/internal/testclock"
)

func request(t *testing.T, c *http.Client, method, url string, body []byte, headers ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func TestTTLHeader(t *testing.T) {
	clock := testclock.New()
	reg := prometheus.NewRegistry()
	mem := store.NewMemory(64<<20, store.Options{DefaultTTL: time.Hour, Now: clock.Now})
	srv := httptest.NewServer(Handler(Config{MaxValueBytes: 1 << 20}, mem, metrics.New(reg, mem), reg))
	defer srv.Close()
	c := srv.Client()
	steps := []struct {
		name         string
		method, key  string
		ttl          string // sent on PUT
		advance      time.Duration
		want         int
		wantTTL      string // X-Warmpath-TTL-Seconds on a GET
		wantErrParam bool
	}{
		{name: "put with ttl", method: "PUT", key: "short", ttl: "10", want: 204},
		{name: "put with default", method: "PUT", key: "default", want: 204},
		{name: "ttl reported", method: "GET", key: "short", want: 200, wantTTL: "10"},
		{name: "default reported", method: "GET", key: "default", want: 200, wantTTL: "3600"},
		{name: "rounded up", method: "HEAD", key: "short", advance: 2500 * time.Millisecond, want: 200, wantTTL: "8"},
		{name: "expired", method: "GET", key: "short", advance: 7500 * time.Millisecond, want: 404},
		{name: "zero refused", method: "PUT", key: "k", ttl: "0", want: 400, wantErrParam: true},
		{name: "negative refused", method: "PUT", key: "k", ttl: "-3", want: 400, wantErrParam: true},
		{name: "fraction refused", method: "PUT", key: "k", ttl: "1.5", want: 400, wantErrParam: true},
		{name: "too long refused", method: "PUT", key: "k", ttl: "9223372036854775807", want: 400, wantErrParam: true},
	}
	for _, st := range steps {
		clock.Advance(st.advance)
		var headers []string
		if st.ttl != "" {
			headers = []string{"X-Warmpath-TTL-Seconds", st.ttl}
		}
		resp, body := request(t, c, st.method, srv.URL+"/v1/objects/"+st.key, []byte("v"), headers...)
		if resp.StatusCode != st.want {
			t.Fatalf("%s: status %d (%s), want %d", st.name, resp.StatusCode, body, st.want)
		}
		if got := resp.Header.Get("X-Warmpath-TTL-Seconds"); st.wantTTL != "" && got != st.wantTTL {
			t.Errorf("%s: TTL header %q, want %q", st.name, got, st.wantTTL)
		}
		if st.wantErrParam && !bytes.Contains(body, []byte(`"param":"X-Warmpath-Ttl-Seconds"`)) {
			t.Errorf("%s: error does not name the header: %s", st.name, body)
		}
	}
	if st := mem.Stats(); st.Expired != 1 {
		t.Fatalf("expired %d, want 1", st.Expired)
	}
}

// FuzzParseTTL: any header value is refused or gives 1 s to 100 years.
func FuzzParseTTL(f *testing.F) {
	for _, s := range []string{"1", "3600", "0", "-1", "1.5", "", "3153600000", "3153600001", "+5", "0x10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseTTL(s)
		if err == nil && (d < time.Second || d > maxTTL || d%time.Second != 0) {
			t.Fatalf("%q gave %v", s, d)
		}
	})
}

func TestBearerToken(t *testing.T) {
	tests := []struct {
		header string
		want   string
		wantOK bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"BEARER  abc ", "abc", true},
		{"Basic abc", "", false},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		if got, ok := bearerToken(tt.header); got != tt.want || ok != tt.wantOK {
			t.Errorf("%q: got %q %v, want %q %v", tt.header, got, ok, tt.want, tt.wantOK)
		}
	}
}

// serveTLS serves h the way the command does: httpserve over a TLS
// listener built by tlsconf.
func serveTLS(t *testing.T, h http.Handler, files tlsconf.Files) string {
	t.Helper()
	cfg, err := tlsconf.Server(files, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := httpserve.New(h, slog.New(slog.DiscardHandler))
	done := make(chan error, 1)
	go func() { done <- hs.Serve(tls.NewListener(ln, cfg)) }()
	t.Cleanup(func() {
		httpserve.Shutdown(context.Background(), hs, time.Second, slog.New(slog.DiscardHandler))
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return "https://" + ln.Addr().String()
}

func tlsClient(t *testing.T, caFile string, certs ...tls.Certificate) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12},
	}}
}

// TestAuthOverTLS: a real http.Client over TLS against the bearer-token
// guard: which endpoints need the token, and what a refusal looks like.
func TestAuthOverTLS(t *testing.T) {
	certs := testcert.Write(t, "cacheserver")
	for _, protectMetrics := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		mem := store.NewMemory(64<<20, store.Options{})
		m := metrics.New(reg, mem)
		snapshot := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"seq":-1,"hashes":[]}`)) })
		url := serveTLS(t, Handler(Config{MaxValueBytes: 1 << 20, Token: "t0ken", ProtectMetrics: protectMetrics, KVEventsSnapshot: snapshot}, mem, m, reg),
			tlsconf.Files{CertFile: certs.Cert, KeyFile: certs.Key})
		c := tlsClient(t, certs.CA)
		good := []string{"Authorization", "Bearer t0ken"}
		tests := []struct {
			name, method, path string
			headers            []string
			want               int
			wantChallenge      string // in WWW-Authenticate on a 401
		}{
			{"put with token", "PUT", "/v1/objects/k", good, 204, ""},
			{"get with token", "GET", "/v1/objects/k", good, 200, ""},
			{"stats with token", "GET", "/v1/stats", good, 200, ""},
			{"get without token", "GET", "/v1/objects/k", nil, 401, `Bearer realm="warmpath-cacheserver"`},
			{"put wrong token", "PUT", "/v1/objects/k", []string{"Authorization", "Bearer nope"}, 401, `error="invalid_token"`},
			{"delete token prefix", "DELETE", "/v1/objects/k", []string{"Authorization", "Bearer t0ke"}, 401, `error="invalid_token"`},
			{"head basic auth", "HEAD", "/v1/objects/k", []string{"Authorization", "Basic dDBrZW4="}, 401, "Bearer"},
			{"stats without token", "GET", "/v1/stats", nil, 401, "Bearer"},
			{"kv events snapshot with token", "GET", "/v1/kv-events/snapshot?model=m", good, 200, ""},
			{"kv events snapshot without token", "GET", "/v1/kv-events/snapshot?model=m", nil, 401, "Bearer"},
			{"healthz open", "GET", "/healthz", nil, 200, ""},
			{"readyz open", "GET", "/readyz", nil, 200, ""},
			{"metrics", "GET", "/metrics", nil, map[bool]int{false: 200, true: 401}[protectMetrics], "Bearer"},
			{"metrics with token", "GET", "/metrics", good, 200, ""},
		}
		failures := 0
		for _, tt := range tests {
			resp, body := request(t, c, tt.method, url+tt.path, []byte("v"), tt.headers...)
			if resp.StatusCode != tt.want {
				t.Errorf("protect metrics %v, %s: status %d, want %d", protectMetrics, tt.name, resp.StatusCode, tt.want)
				continue
			}
			if tt.want != http.StatusUnauthorized {
				continue
			}
			failures++
			if got := resp.Header.Get("WWW-Authenticate"); !strings.Contains(got, tt.wantChallenge) {
				t.Errorf("%s: WWW-Authenticate %q, want it to contain %q", tt.name, got, tt.wantChallenge)
			}
			if tt.method == http.MethodHead {
				continue
			}
			var e openai.ErrorResponse
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != 401 || e.Error.Type != openai.TypeUnauthorized {
				t.Errorf("%s: body %s, want an OpenAI-style 401 error", tt.name, body)
			}
		}
		if got := testutil.ToFloat64(m.AuthFailures.WithLabelValues("http")); got != float64(failures) {
			t.Errorf("auth failures %v, want %d", got, failures)
		}
	}
}

// TestMutualTLS: with a client CA, the HTTP API serves only clients with a
// certificate it signed.
func TestMutualTLS(t *testing.T) {
	certs := testcert.Write(t, "cacheserver")
	reg := prometheus.NewRegistry()
	mem := store.NewMemory(64<<20, store.Options{})
	url := serveTLS(t, Handler(Config{MaxValueBytes: 1 << 20}, mem, metrics.New(reg, mem), reg),
		tlsconf.Files{CertFile: certs.Cert, KeyFile: certs.Key, ClientCAFile: certs.CA})
	clientCert, err := tls.LoadX509KeyPair(certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	if resp, body := request(t, tlsClient(t, certs.CA, clientCert), "GET", url+"/v1/stats", nil); resp.StatusCode != 200 {
		t.Fatalf("with a client certificate: %d %s", resp.StatusCode, body)
	}
	req, _ := http.NewRequestWithContext(t.Context(), "GET", url+"/v1/stats", nil)
	resp, err := tlsClient(t, certs.CA).Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("served without a client certificate: %d", resp.StatusCode)
	}
	// Plain HTTP to the TLS port is not served.
	req, _ = http.NewRequestWithContext(t.Context(), "GET", strings.Replace(url, "https", "http", 1)+"/healthz", nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP served on the TLS port")
		}
	}
}

// FuzzBearerToken: any Authorization value yields no token or a non-empty
// one without surrounding space, taken from the value after its scheme.
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer  abc ", "Basic x", "Bearer", "", " Bearer x", "Bearer \t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		tok, ok := bearerToken(header)
		if !ok {
			if tok != "" {
				t.Fatalf("%q: token %q without ok", header, tok)
			}
			return
		}
		if tok == "" || tok != strings.TrimSpace(tok) || !strings.HasSuffix(strings.TrimSpace(header), tok) || !strings.EqualFold(header[:6], "bearer") {
			t.Fatalf("%q gave %q", header, tok)
		}
	})
}
