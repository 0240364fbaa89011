// Command healthz is the harness's own test subject: an HTTP server that
// answers 200 on /health and echoes its arguments on /args.
package main

import (
	"flag"
	"fmt"
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
	addr := net.JoinHostPort(*host, *port)
	log.Printf("healthz listening on %s", addr)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
