package proxy

import (
	"net/http"
	"strings"

	"github.com/valyala/fasthttp"
)

// hopHeaders are meaningful only for one connection (RFC 9110 §7.6.1) and
// are never forwarded. Host and Content-Length are not hop-by-hop, but the
// side that writes a message frames it itself, so they are not copied
// either; Date is the router's own on what it sends.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
	"Host", "Content-Length",
}

// requestHeaders returns the client request's end-to-end headers, as
// strings the worker request may keep after the handler returns (fasthttp
// reuses its buffers).
func requestHeaders(h *fasthttp.RequestHeader) http.Header {
	named := connectionNamed(string(h.Peek(fasthttp.HeaderConnection)))
	out := make(http.Header, 8)
	for k, v := range h.All() {
		key := string(k)
		if isHop(key, named) {
			continue
		}
		out[key] = append(out[key], string(v))
	}
	return out
}

// copyResponseHeaders copies a worker response's end-to-end headers into
// the client response.
func copyResponseHeaders(dst *fasthttp.ResponseHeader, src http.Header) {
	var named []string
	for _, v := range src.Values("Connection") {
		named = append(named, connectionNamed(v)...)
	}
	for k, vv := range src {
		if isHop(k, named) || k == "Date" {
			continue
		}
		for _, v := range vv {
			dst.Add(k, v)
		}
	}
}

// connectionNamed lists the header names a Connection field declares
// hop-by-hop, canonicalised.
func connectionNamed(v string) []string {
	if v == "" {
		return nil
	}
	var named []string
	for f := range strings.SplitSeq(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			named = append(named, http.CanonicalHeaderKey(f))
		}
	}
	return named
}

func isHop(k string, named []string) bool {
	for _, h := range hopHeaders {
		if k == h {
			return true
		}
	}
	for _, h := range named {
		if k == h {
			return true
		}
	}
	return false
}

// headerCarrier reads W3C trace context from a fasthttp request for the
// OpenTelemetry propagator.
type headerCarrier struct{ h *fasthttp.RequestHeader }

func (c headerCarrier) Get(key string) string { return string(c.h.Peek(key)) }

// Set is never called: the carrier is only extracted from.
func (c headerCarrier) Set(key, value string) { c.h.Set(key, value) }

func (c headerCarrier) Keys() []string {
	var keys []string
	for k := range c.h.All() {
		keys = append(keys, string(k))
	}
	return keys
}
