package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/warmpath/warmpath/libs/openai"
	"github.com/warmpath/warmpath/services/cacheserver/internal/metrics"
)

// bearer guards next with a bearer token (RFC 6750). A missing or wrong
// token gets 401, an OpenAI-style error and a WWW-Authenticate challenge,
// and counts as an auth failure. An empty token lets every request in.
func bearer(token string, m *metrics.Metrics, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	// Comparing digests keeps the comparison constant-time in the token's
	// length too (subtle.ConstantTimeCompare returns early on a length
	// mismatch).
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := bearerToken(r.Header.Get("Authorization"))
		sum := sha256.Sum256([]byte(got))
		if ok && subtle.ConstantTimeCompare(sum[:], want[:]) == 1 {
			next.ServeHTTP(w, r)
			return
		}
		m.AuthFailures.WithLabelValues("http").Inc()
		challenge := `Bearer realm="warmpath-cacheserver"`
		msg := "missing bearer token: send Authorization: Bearer <token>"
		if ok {
			challenge += `, error="invalid_token"`
			msg = "invalid bearer token"
		}
		w.Header().Set("WWW-Authenticate", challenge)
		openai.WriteError(w, openai.Errorf(http.StatusUnauthorized, "%s", msg))
	})
}

// bearerToken returns the token of an "Authorization: Bearer <token>"
// header value (the scheme is case-insensitive); ok is false when there is
// none.
func bearerToken(header string) (string, bool) {
	scheme, token, found := strings.Cut(header, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
