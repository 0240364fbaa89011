// Package tlsconf builds the cache server's TLS configuration from PEM
// files: a serving certificate that is reloaded when its files change (a
// cert-manager renewal or a rotated Kubernetes Secret needs no restart),
// and optionally a CA that client certificates must chain to (mTLS).
package tlsconf

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
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
	if recheck <= 0 {
		recheck = time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &reloader{files: f, recheck: recheck, log: log}
	if err := r.load(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}
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

// reloader holds the current certificate and the file contents it came
// from. mu guards every field below it.
type reloader struct {
	files   Files
	recheck time.Duration
	log     *slog.Logger

	mu        sync.Mutex
	cert      *tls.Certificate
	certPEM   []byte
	keyPEM    []byte
	checkedAt time.Time
}

// load reads both files and replaces the certificate if they changed.
// Comparing contents rather than modification times also catches a
// Kubernetes Secret update, which swaps a symlink.
func (r *reloader) load() error {
	certPEM, err := os.ReadFile(r.files.CertFile)
	if err != nil {
		return fmt.Errorf("tlsconf: certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(r.files.KeyFile)
	if err != nil {
		return fmt.Errorf("tlsconf: key: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checkedAt = time.Now()
	if r.cert != nil && bytes.Equal(certPEM, r.certPEM) && bytes.Equal(keyPEM, r.keyPEM) {
		return nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("tlsconf: %s and %s: %w", r.files.CertFile, r.files.KeyFile, err)
	}
	r.cert, r.certPEM, r.keyPEM = &cert, certPEM, keyPEM
	return nil
}

func (r *reloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	due := time.Since(r.checkedAt) >= r.recheck
	r.mu.Unlock()
	if due {
		if err := r.load(); err != nil {
			// A renewal half-written, or a bad one: keep serving the old
			// certificate until the files are whole again.
			r.log.Warn("tls: keeping the previous certificate", "err", err)
			r.mu.Lock()
			r.checkedAt = time.Now()
			r.mu.Unlock()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cert, nil
}
