// Package tlsconf builds a server's TLS configuration (the cache server's,
// the router's) from PEM files: a serving certificate that is reloaded
// when its files change (a cert-manager renewal or a rotated Kubernetes
// Secret needs no restart), and optionally a CA that client certificates
// must chain to (mTLS).
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/warmpath/warmpath/libs/filereload"
)

// Files names the PEM files. CertFile and KeyFile are required together;
// ClientCAFile is optional.
type Files struct {
	CertFile, KeyFile string
	// ClientCAFile, when set, makes client certificates mandatory: each
	// must chain to a CA in this file. It is read once, at start.
	ClientCAFile string
}

// Enabled reports whether f asks for TLS at all.
func (f Files) Enabled() bool { return f.CertFile != "" || f.KeyFile != "" || f.ClientCAFile != "" }

// ErrIncomplete is returned when only part of the certificate pair is set.
var ErrIncomplete = errors.New("tlsconf: --tls-cert-file and --tls-key-file must be given together (and --tls-client-ca-file needs both)")

// Server loads f and returns a server configuration (TLS 1.2 or later).
// The certificate is checked for changes at most once per recheck (1s when
// 0) during handshakes; a reload that fails keeps the previous certificate
// and logs why. Errors at start name the file at fault.
func Server(f Files, recheck time.Duration, log *slog.Logger) (*tls.Config, error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, ErrIncomplete
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cert, err := filereload.New(recheck, log.With("component", "tls"), func(c [][]byte) (*tls.Certificate, error) {
		pair, err := tls.X509KeyPair(c[0], c[1])
		if err != nil {
			return nil, fmt.Errorf("tlsconf: %s and %s: %w", f.CertFile, f.KeyFile, err)
		}
		return &pair, nil
	}, f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: certificate: %w", err)
	}
	get := func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert.Get(), nil }
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: get}
	if f.ClientCAFile != "" {
		pem, err := os.ReadFile(f.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tlsconf: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tlsconf: client CA %s: no PEM certificate in it", f.ClientCAFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
