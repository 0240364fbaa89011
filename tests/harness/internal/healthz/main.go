// Command healthz is the harness's own test subject: an HTTP server that
// answers 200 on /health, echoes its arguments on /args, and relays
// GET /fetch?url=U: it fetches U itself and answers with U's status and body,
// so a test can probe the container's own network view (aliases, DNS).
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	host := flag.String("host", "0.0.0.0", "listen host")
	port := flag.String("port", "8000", "listen port")
	flag.Parse()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /args", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, strings.Join(os.Args[1:], " "))
	})
	client := &http.Client{Timeout: 5 * time.Second}
	mux.HandleFunc("GET /fetch", func(w http.ResponseWriter, r *http.Request) {
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, r.URL.Query().Get("url"), nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	})
	addr := net.JoinHostPort(*host, *port)
	log.Printf("healthz listening on %s", addr)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
