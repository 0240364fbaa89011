package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/testcert"
)

func TestServerErrors(t *testing.T) {
	c := testcert.Write(t, "first")
	tests := []struct {
		name  string
		files Files
		want  string
	}{
		{"key missing", Files{CertFile: c.Cert}, "must be given together"},
		{"client CA alone", Files{ClientCAFile: c.CA}, "must be given together"},
		{"no such cert", Files{CertFile: c.Cert + ".nope", KeyFile: c.Key}, "open " + c.Cert + ".nope"},
		{"no such key", Files{CertFile: c.Cert, KeyFile: c.Key + ".nope"}, "open " + c.Key + ".nope"},
		{"key of another cert", Files{CertFile: c.Cert, KeyFile: c.ClientKey}, "private key does not match"},
		{"not a CA file", Files{CertFile: c.Cert, KeyFile: c.Key, ClientCAFile: c.Key}, "no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Server(tt.files, 0, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if _, err := Server(Files{KeyFile: c.Key}, 0, nil); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("got %v, want ErrIncomplete", err)
	}
}

// serve accepts TLS connections on a loopback port, completing each
// handshake, until the test ends.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.(*tls.Conn).Handshake()
			_ = conn.Close()
		}
	}()
	return ln.Addr().String()
}

func pool(t *testing.T, caFile string) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(pem)
	return p
}

func subject(t *testing.T, addr string, cfg *tls.Config) (string, error) {
	t.Helper()
	conn, err := (&tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: cfg}).DialContext(t.Context(), "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

// TestReload: new files are served from the next handshake after the
// recheck interval; broken files keep the previous certificate.
func TestReload(t *testing.T) {
	first, second := testcert.Write(t, "first"), testcert.Write(t, "second")
	// The served files are copies: the steps overwrite them.
	served := t.TempDir()
	firstCert, firstKey := must(os.ReadFile(first.Cert)), must(os.ReadFile(first.Key))
	first.Cert, first.Key = served+"/tls.crt", served+"/tls.key"
	must0(t, os.WriteFile(first.Cert, firstCert, 0o600))
	must0(t, os.WriteFile(first.Key, firstKey, 0o600))
	original := t.TempDir()
	must0(t, os.WriteFile(original+"/tls.crt", firstCert, 0o600))
	must0(t, os.WriteFile(original+"/tls.key", firstKey, 0o600))
	cfg, err := Server(Files{CertFile: first.Cert, KeyFile: first.Key}, time.Nanosecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	trustBoth := pool(t, first.CA)
	trustBoth.AppendCertsFromPEM(must(os.ReadFile(second.CA)))
	client := &tls.Config{RootCAs: trustBoth, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	steps := []struct {
		name      string
		cert, key string // copied over the served files; empty: no change
		want      string
	}{
		{"initial", "", "", "first"},
		{"rotated", second.Cert, second.Key, "second"},
		{"half-written", "garbage", "", "second"},
		{"whole again", second.Cert, second.Key, "second"},
		{"rotated back", original + "/tls.crt", original + "/tls.key", "first"},
	}
	for _, st := range steps {
		if st.cert == "garbage" {
			must0(t, os.WriteFile(first.Cert, []byte("not PEM"), 0o600))
		} else if st.cert != "" {
			must0(t, os.WriteFile(first.Cert, must(os.ReadFile(st.cert)), 0o600))
			must0(t, os.WriteFile(first.Key, must(os.ReadFile(st.key)), 0o600))
		}
		got, err := subject(t, addr, client)
		if err != nil || got != st.want {
			t.Fatalf("%s: served %q (%v), want %q", st.name, got, err, st.want)
		}
	}
}

func TestClientCertificates(t *testing.T) {
	c := testcert.Write(t, "server")
	cfg, err := Server(Files{CertFile: c.Cert, KeyFile: c.Key, ClientCAFile: c.CA}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	clientCert, err := tls.LoadX509KeyPair(c.ClientCert, c.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	stranger := testcert.Write(t, "stranger")
	strangerCert, err := tls.LoadX509KeyPair(stranger.ClientCert, stranger.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		certs  []tls.Certificate
		wantOK bool
	}{
		{"signed by the client CA", []tls.Certificate{clientCert}, true},
		{"no certificate", nil, false},
		{"signed by another CA", []tls.Certificate{strangerCert}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool(t, c.CA), Certificates: tt.certs, MinVersion: tls.VersionTLS13})
			if err == nil {
				// TLS 1.3: the server's verdict on the client certificate
				// arrives with the first read.
				_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, err = conn.Read(make([]byte, 1))
				conn.Close()
			}
			rejected := err != nil && strings.Contains(err.Error(), "certificate")
			if rejected == tt.wantOK {
				t.Fatalf("got %v, want accepted %v", err, tt.wantOK)
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func must0(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
