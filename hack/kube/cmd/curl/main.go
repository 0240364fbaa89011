// Command curl stands in for curl in the chart's `helm test` pod on the e2e
// node, where no registry serves curlimages/curl. It accepts exactly the
// flags that pod passes (-H, -d, --max-time, --retry, --retry-delay,
// --retry-all-errors, --fail-with-body, --silent, --show-error) and refuses
// any other, so a chart change that needs more of curl fails loudly here
// rather than passing for the wrong reason. Exit codes follow curl's: 22
// for an HTTP error status, 28 for a timeout, 7 for anything else on the
// network, 2 for a usage error.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

type options struct {
	headers    []string
	data       string
	url        string
	maxTime    time.Duration
	retries    int
	retryDelay time.Duration
}

func main() {
	o, err := parse(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "curl:", err)
		os.Exit(2)
	}
	os.Exit(run(o))
}

func parse(args []string) (options, error) {
	o := options{retryDelay: time.Second}
	for i := 0; i < len(args); i++ {
		a := args[i]
		value := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("option %s needs a value", a)
			}
			i++
			return args[i], nil
		}
		var v string
		var err error
		switch a {
		case "-H", "--header":
			v, err = value()
			o.headers = append(o.headers, v)
		case "-d", "--data":
			o.data, err = value()
		case "-m", "--max-time":
			if v, err = value(); err == nil {
				var s float64
				s, err = strconv.ParseFloat(v, 64)
				o.maxTime = time.Duration(s * float64(time.Second))
			}
		case "--retry":
			if v, err = value(); err == nil {
				o.retries, err = strconv.Atoi(v)
			}
		case "--retry-delay":
			if v, err = value(); err == nil {
				var s int
				s, err = strconv.Atoi(v)
				o.retryDelay = time.Duration(s) * time.Second
			}
		case "--retry-all-errors", "--fail-with-body", "-s", "--silent", "-S", "--show-error":
			// The behaviour these select is the only one this stand-in has.
		default:
			if strings.HasPrefix(a, "-") {
				return o, fmt.Errorf("option %s is not supported by this stand-in", a)
			}
			if o.url != "" {
				return o, fmt.Errorf("one URL only (got %q and %q)", o.url, a)
			}
			o.url = a
		}
		if err != nil {
			return o, fmt.Errorf("option %s: %w", a, err)
		}
	}
	if o.url == "" {
		return o, errors.New("no URL specified")
	}
	return o, nil
}

// run makes the request, retrying every failure up to o.retries times, and
// returns curl's exit code. The body of the last answer goes to stdout.
func run(o options) int {
	ctx := context.Background()
	if o.maxTime > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.maxTime)
		defer cancel()
	}
	code := 0
	for try := 0; ; try++ {
		var err error
		code, err = once(ctx, o)
		if code == 0 {
			return 0
		}
		fmt.Fprintf(os.Stderr, "curl: attempt %d: %v\n", try+1, err)
		if try >= o.retries || ctx.Err() != nil {
			return code
		}
		select {
		case <-time.After(o.retryDelay):
		case <-ctx.Done():
			return 28
		}
	}
}

func once(ctx context.Context, o options) (int, error) {
	method, body := http.MethodGet, io.Reader(nil)
	if o.data != "" {
		method, body = http.MethodPost, strings.NewReader(o.data)
	}
	req, err := http.NewRequestWithContext(ctx, method, o.url, body)
	if err != nil {
		return 3, err
	}
	if o.data != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for _, h := range o.headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok {
			return 2, fmt.Errorf("header %q has no colon", h)
		}
		req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return 28, err
		}
		return 7, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(os.Stdout, resp.Body); err != nil {
		return 56, fmt.Errorf("reading the body: %w", err)
	}
	if resp.StatusCode >= 400 {
		return 22, fmt.Errorf("the server answered %s", resp.Status)
	}
	return 0, nil
}
