// Package s3test runs a real S3-compatible server (gofakes3, in memory) on
// loopback for tests, with faults injected in front of it: the copy is
// exercised over the S3 wire protocol with the real SDK client, not against
// a stand-in for the client.
package s3test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Credentials the server accepts (gofakes3 does not check signatures; the
// client signs anyway).
const (
	AccessKey = "test-access-key"
	SecretKey = "test-secret-key"
	Region    = "us-east-1"
)

// Fault changes the server's answer to one GET of an object.
type Fault int

const (
	// None serves the object.
	None Fault = iota
	// Unavailable answers 503 SlowDown.
	Unavailable
	// Forbidden answers 403 AccessDenied.
	Forbidden
	// Cut sends the headers and the first half of the body, then drops the
	// connection.
	Cut
	// Stall sends the headers and the first half of the body, then nothing
	// until the client gives up.
	Stall
)

// Server is the S3 server and what it saw.
type Server struct {
	URL string

	mu       sync.Mutex
	faults   map[string][]Fault // key -> faults for the next GETs, in order
	gets     map[string]int
	inFlight int
	maxIn    int
	entered  int
	gate     func(inFlight, entered int) bool // GETs wait until it returns true
	cond     *sync.Cond
}

// Start runs a server until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{faults: map[string][]Fault{}, gets: map[string]int{}}
	s.cond = sync.NewCond(&s.mu)
	faker := gofakes3.New(s3mem.New())
	srv := httptest.NewServer(s.wrap(faker.Server()))
	t.Cleanup(func() {
		s.mu.Lock()
		s.gate = nil
		s.cond.Broadcast()
		s.mu.Unlock()
		srv.CloseClientConnections()
		srv.Close()
	})
	s.URL = srv.URL
	return s
}

// Client is an SDK client of the server, retrying as the given attempts.
func (s *Server) Client(attempts int) *s3.Client {
	return s3.New(s3.Options{
		Region:           Region,
		BaseEndpoint:     aws.String(s.URL),
		UsePathStyle:     true,
		Credentials:      credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, ""),
		RetryMaxAttempts: attempts,
	})
}

// Put creates the bucket if needed and stores the objects (key -> body).
func (s *Server) Put(t testing.TB, bucket string, objects map[string][]byte) {
	t.Helper()
	c := s.Client(1)
	ctx := context.Background()
	if _, err := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(bucket)}); err != nil {
		if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
			t.Fatalf("create bucket %s: %v", bucket, err)
		}
	}
	for k, v := range objects {
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(k), Body: bytes.NewReader(v)}); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
}

// Inject queues faults for the next GETs of key (a key as the client sends
// it in the path, without the bucket).
func (s *Server) Inject(key string, faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[key] = append(s.faults[key], faults...)
}

// Gate makes every GET wait until open(GETs in flight, GETs received so
// far) is true, so a test can hold downloads together and see how many run
// at once.
func (s *Server) Gate(open func(inFlight, entered int) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate = open
}

// Gets is how many GETs of key the server answered (faults included).
func (s *Server) Gets(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets[key]
}

// MaxInFlight is the most object GETs the server had at once.
func (s *Server) MaxInFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxIn
}

func (s *Server) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Path style: /bucket/key. A listing has no key.
		_, key, isObject := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		if r.Method != http.MethodGet || !isObject || key == "" {
			next.ServeHTTP(w, r)
			return
		}
		s.mu.Lock()
		s.gets[key]++
		s.entered++
		s.inFlight++
		s.maxIn = max(s.maxIn, s.inFlight)
		s.cond.Broadcast()
		for s.gate != nil && !s.gate(s.inFlight, s.entered) && r.Context().Err() == nil {
			s.cond.Wait()
		}
		fault := None
		if q := s.faults[key]; len(q) > 0 {
			fault, s.faults[key] = q[0], q[1:]
		}
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.inFlight--
			s.cond.Broadcast()
			s.mu.Unlock()
		}()
		switch fault {
		case Unavailable:
			http.Error(w, `<Error><Code>SlowDown</Code><Message>injected</Message></Error>`, http.StatusServiceUnavailable)
		case Forbidden:
			http.Error(w, `<Error><Code>AccessDenied</Code><Message>injected</Message></Error>`, http.StatusForbidden)
		case Cut, Stall:
			next.ServeHTTP(&halfWriter{ResponseWriter: w, stall: fault == Stall, done: r.Context().Done()}, r)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// halfWriter passes on the headers and half the body, then ends the
// connection (panic http.ErrAbortHandler) or blocks until the client leaves.
type halfWriter struct {
	http.ResponseWriter
	stall   bool
	done    <-chan struct{}
	total   int
	written int
}

func (h *halfWriter) WriteHeader(code int) {
	if n, err := strconv.Atoi(h.Header().Get("Content-Length")); err == nil {
		h.total = n
	}
	h.ResponseWriter.WriteHeader(code)
}

func (h *halfWriter) Write(b []byte) (int, error) {
	half := h.total / 2
	if h.written+len(b) <= half {
		h.written += len(b)
		return h.ResponseWriter.Write(b)
	}
	n, _ := h.ResponseWriter.Write(b[:half-h.written])
	h.written += n
	if f, ok := h.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	if h.stall {
		<-h.done
	}
	panic(http.ErrAbortHandler)
}
