// Package s3copy copies the objects under a prefix of an S3-compatible
// bucket into a local directory: the model fetcher's one job. Files are
// written under a temporary name and renamed when complete and of the listed
// size, so a file with its final name is always whole, and a copy that was
// cut short (the init container restarted, the node's network dropped)
// resumes by skipping the files already there.
package s3copy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// API is the part of the S3 client Copy uses (*s3.Client has it).
type API interface {
	ListObjectsV2(ctx context.Context, in *s3.ListObjectsV2Input, optFns ...func(*s3.Options)) (*s3.ListObjectsV2Output, error)
	GetObject(ctx context.Context, in *s3.GetObjectInput, optFns ...func(*s3.Options)) (*s3.GetObjectOutput, error)
}

// Options say what to copy where, and how patiently.
type Options struct {
	// Bucket and Prefix select the objects. A non-empty Prefix is a
	// directory: "llama" copies llama/config.json as config.json, and never
	// llama-old/config.json.
	Bucket, Prefix string
	// Dest is the directory the objects are written into; it is created.
	Dest string
	// Concurrency is the number of objects downloaded at once (default 4).
	Concurrency int
	// Attempts bounds the tries per object and per listing page (default
	// 5). The client's own retryer covers failed requests; these cover
	// what it cannot see, a body cut off or stalled half way.
	Attempts int
	// StallTimeout ends an attempt that receives no byte for this long
	// (default 60s). A whole-object deadline would fail multi-gigabyte
	// weight shards on a slow link; a stall is what a hung peer looks like.
	StallTimeout time.Duration
	// RequestTimeout bounds one listing request (default 60s).
	RequestTimeout time.Duration
	// PageSize is the keys asked for per listing request; 0 leaves the
	// server's default (1000 on S3).
	PageSize int32
	// Backoff is the first pause between attempts, doubled each time up to
	// 30s (default 1s).
	Backoff time.Duration
	// Log receives one line per object and per retry; nil discards them.
	Log *slog.Logger
}

// Result counts what a copy did.
type Result struct {
	Objects, Skipped    int   // downloaded, and found complete already
	Bytes, SkippedBytes int64 // their sizes
}

type object struct {
	key  string
	rel  string // path under Dest
	size int64
}

func (o *Options) defaults() {
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	if o.Attempts <= 0 {
		o.Attempts = 5
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = time.Minute
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = time.Minute
	}
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}

// Copy downloads every object under opts.Prefix into opts.Dest. It fails
// when the prefix holds no object (a model source with nothing in it is a
// mistake in bucketName or modelLocation, not an empty model), when a key
// would land outside Dest, and when an object cannot be fetched whole within
// its attempts; the first failure stops the others.
func Copy(ctx context.Context, api API, opts Options) (Result, error) {
	opts.defaults()
	prefix := opts.Prefix
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	where := fmt.Sprintf("s3://%s/%s", opts.Bucket, prefix)
	objs, err := list(ctx, api, opts, prefix)
	if err != nil {
		return Result{}, fmt.Errorf("listing %s: %w", where, err)
	}
	if len(objs) == 0 {
		return Result{}, fmt.Errorf("no objects under %s: check the bucket name, the model location (prefix) and the credentials' list permission", where)
	}
	if err := os.MkdirAll(opts.Dest, 0o755); err != nil {
		return Result{}, fmt.Errorf("creating %s: %w", opts.Dest, err)
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu  sync.Mutex
		res Result
		wg  sync.WaitGroup
	)
	work := make(chan object)
	for range min(opts.Concurrency, len(objs)) {
		wg.Go(func() {
			for o := range work {
				skipped, err := fetch(ctx, api, opts, o)
				if err != nil {
					cancel(fmt.Errorf("s3://%s/%s: %w", opts.Bucket, o.key, err))
					continue // drain: the feeder stops on ctx
				}
				mu.Lock()
				if skipped {
					res.Skipped++
					res.SkippedBytes += o.size
				} else {
					res.Objects++
					res.Bytes += o.size
				}
				mu.Unlock()
			}
		})
	}
feed:
	for _, o := range objs {
		select {
		case work <- o:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return res, err
	}
	return res, nil
}

func list(ctx context.Context, api API, opts Options, prefix string) ([]object, error) {
	var objs []object
	in := &s3.ListObjectsV2Input{Bucket: aws.String(opts.Bucket), Prefix: aws.String(prefix)}
	if opts.PageSize > 0 {
		in.MaxKeys = aws.Int32(opts.PageSize)
	}
	for {
		var out *s3.ListObjectsV2Output
		err := retry(ctx, opts, "list "+prefix, func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, opts.RequestTimeout)
			defer cancel()
			var err error
			out, err = api.ListObjectsV2(ctx, in)
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, c := range out.Contents {
			key := aws.ToString(c.Key)
			rel := strings.TrimPrefix(key, prefix)
			if strings.HasSuffix(key, "/") && aws.ToInt64(c.Size) == 0 {
				continue // a console "folder" marker, not a file
			}
			if rel == "" || !filepath.IsLocal(filepath.FromSlash(rel)) {
				return nil, fmt.Errorf("object key %q would be written outside the destination", key)
			}
			objs = append(objs, object{key: key, rel: filepath.FromSlash(rel), size: aws.ToInt64(c.Size)})
		}
		if !aws.ToBool(out.IsTruncated) || out.NextContinuationToken == nil {
			return objs, nil
		}
		in.ContinuationToken = out.NextContinuationToken
	}
}

// fetch downloads one object unless a complete copy is there already.
func fetch(ctx context.Context, api API, opts Options, o object) (skipped bool, err error) {
	dst := filepath.Join(opts.Dest, o.rel)
	if fi, err := os.Stat(dst); err == nil && fi.Mode().IsRegular() && fi.Size() == o.size {
		opts.Log.Info("model file present", "key", o.key, "bytes", o.size)
		return true, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return false, fmt.Errorf("creating %s: %w", filepath.Dir(dst), err)
	}
	start := time.Now()
	err = retry(ctx, opts, o.key, func(ctx context.Context) error { return download(ctx, api, opts, o, dst) })
	if err != nil {
		return false, err
	}
	opts.Log.Info("model file fetched", "key", o.key, "bytes", o.size, "seconds", time.Since(start).Seconds())
	return false, nil
}

// download is one attempt: the object into a temporary file, checked for
// its listed size, then renamed into place.
func download(ctx context.Context, api API, opts Options, o object, dst string) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errStalled := fmt.Errorf("no data for %s", opts.StallTimeout)
	stall := time.AfterFunc(opts.StallTimeout, func() { cancel(errStalled) })
	defer stall.Stop()

	out, err := api.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(opts.Bucket), Key: aws.String(o.key)})
	if err != nil {
		return stalledOr(ctx, err)
	}
	defer func() { _ = out.Body.Close() }()
	if out.ContentLength != nil && *out.ContentLength != o.size {
		// The object was replaced since it was listed: its new size is
		// taken on the next run, not mixed into this one.
		return permanent(fmt.Errorf("size changed: listed %d bytes, served %d", o.size, *out.ContentLength))
	}
	tmp := filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".part")
	f, err := os.Create(tmp)
	if err != nil {
		return permanent(fmt.Errorf("creating %s: %w", tmp, err))
	}
	n, err := io.Copy(f, &progressReader{r: out.Body, onRead: func() { stall.Reset(opts.StallTimeout) }})
	if cerr := f.Close(); err == nil && cerr != nil {
		err = permanent(fmt.Errorf("writing %s: %w", tmp, cerr))
	}
	if err == nil && n != o.size {
		err = fmt.Errorf("short read: %d of %d bytes", n, o.size)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return stalledOr(ctx, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return permanent(fmt.Errorf("renaming %s: %w", tmp, err))
	}
	return nil
}

// stalledOr names the stall when the attempt's context was ended by it.
func stalledOr(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return fmt.Errorf("%w (%w)", cause, err)
	}
	return err
}

type progressReader struct {
	r      io.Reader
	onRead func()
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.onRead()
	}
	return n, err
}

type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

func permanent(err error) error { return permanentError{err} }

// retryable says whether another attempt could succeed: not for a refusal
// the server will repeat (a 4xx other than 408 and 429: a missing bucket or
// key, denied access), nor for local failures.
func retryable(err error) bool {
	if errors.As(err, new(permanentError)) {
		return false
	}
	var status interface{ HTTPStatusCode() int }
	if errors.As(err, &status) {
		c := status.HTTPStatusCode()
		return c >= 500 || c == 408 || c == 429
	}
	return true
}

func retry(ctx context.Context, opts Options, what string, f func(context.Context) error) error {
	pause := opts.Backoff
	var err error
	for attempt := 1; ; attempt++ {
		if err = f(ctx); err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if !retryable(err) || attempt == opts.Attempts {
			return fmt.Errorf("attempt %d of %d: %w", attempt, opts.Attempts, err)
		}
		opts.Log.Warn("model fetch retrying", "object", what, "attempt", attempt, "of", opts.Attempts, "pause", pause.String(), "err", err.Error())
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		pause = min(2*pause, 30*time.Second)
	}
}
