package proxy

import (
	"net/http"
	"strings"
)

// hopHeaders are meaningful only for one connection (RFC 9110 §7.6.1) and
// are never forwarded.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// copyEndToEnd copies src's end-to-end headers into dst.
func copyEndToEnd(dst, src http.Header) {
	var named []string
	for _, v := range src.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				named = append(named, http.CanonicalHeaderKey(f))
			}
		}
	}
	for k, vv := range src {
		if isHop(k, named) {
			continue
		}
		for _, v := range vv {
			dst.Add(k, v)
		}
	}
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
