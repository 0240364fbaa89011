// Command model-fetch copies a model from S3-compatible storage into a
// directory: the operator runs it as the init container of workers whose
// modelSourceConfig is s3. Credentials are the AWS SDK's usual chain
// (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY from a Secret, or web identity
// from the pod's service account).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/warmpath/warmpath/libs/flagenv"
	"github.com/warmpath/warmpath/libs/telemetry"
	"github.com/warmpath/warmpath/services/modelfetch/internal/s3copy"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "model-fetch:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("model-fetch", flag.ContinueOnError)
	var o s3copy.Options
	fs.StringVar(&o.Bucket, "bucket", "", "bucket holding the model (required)")
	fs.StringVar(&o.Prefix, "prefix", "", "key prefix of the model's files, a directory (the endpoint's modelLocation); empty: the whole bucket")
	fs.StringVar(&o.Dest, "dest", "", "directory to copy into (required)")
	region := fs.String("region", "", "the bucket's region (default: AWS_REGION, else us-east-1)")
	endpoint := fs.String("endpoint-url", "", "S3-compatible endpoint, e.g. http://minio.storage:9000 (default: AWS S3)")
	pathStyle := fs.Bool("path-style", false, "address the bucket in the path rather than the host name (most S3-compatible servers need it)")
	fs.IntVar(&o.Concurrency, "concurrency", 4, "objects downloaded at once")
	fs.IntVar(&o.Attempts, "attempts", 5, "tries per object and per listing request")
	fs.DurationVar(&o.StallTimeout, "stall-timeout", time.Minute, "end an attempt that receives no data for this long")
	fs.DurationVar(&o.RequestTimeout, "request-timeout", time.Minute, "bound on one listing request")
	timeout := fs.Duration("timeout", 0, "bound on the whole copy (0: none; the pod's own deadlines apply)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "json", "json or text")
	if err := flagenv.Apply(fs, "WARMPATH_MODEL_FETCH_"); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if o.Bucket == "" || o.Dest == "" {
		return errors.New("--bucket and --dest are required")
	}
	if o.Concurrency < 1 || o.Attempts < 1 {
		return fmt.Errorf("--concurrency %d and --attempts %d: want at least 1", o.Concurrency, o.Attempts)
	}
	log, err := telemetry.NewLogger(os.Stderr, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	o.Log = log
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}

	client, err := newClient(ctx, *region, *endpoint, *pathStyle, o.Attempts)
	if err != nil {
		return err
	}
	start := time.Now()
	log.Info("model fetch starting", "bucket", o.Bucket, "prefix", o.Prefix, "dest", o.Dest, "endpoint", *endpoint, "concurrency", o.Concurrency)
	res, err := s3copy.Copy(ctx, client, o)
	if err != nil {
		return err
	}
	log.Info("model fetch done", "fetched", res.Objects, "fetchedBytes", res.Bytes,
		"present", res.Skipped, "presentBytes", res.SkippedBytes, "seconds", time.Since(start).Seconds())
	return nil
}

// newClient builds the S3 client from the SDK's default chain (environment,
// web identity, shared files, instance roles), with transport timeouts so a
// peer that accepts and never answers cannot hold the copy forever.
func newClient(ctx context.Context, region, endpoint string, pathStyle bool, attempts int) (*s3.Client, error) {
	httpClient := awshttp.NewBuildableClient().WithDialerOptions(func(d *net.Dialer) {
		d.Timeout = 10 * time.Second
	}).WithTransportOptions(func(t *http.Transport) {
		t.TLSHandshakeTimeout = 10 * time.Second
		t.ResponseHeaderTimeout = 30 * time.Second
	})
	opts := []func(*config.LoadOptions) error{config.WithHTTPClient(httpClient), config.WithRetryMaxAttempts(attempts)}
	if region != "" {
		opts = append(opts, config.WithRegion(region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("aws configuration: %w", err)
	}
	if cfg.Region == "" {
		// S3-compatible servers mostly ignore the region but the signer
		// needs one.
		cfg.Region = "us-east-1"
	}
	return s3.NewFromConfig(cfg, func(so *s3.Options) {
		if endpoint != "" {
			so.BaseEndpoint = aws.String(endpoint)
		}
		so.UsePathStyle = pathStyle
	}), nil
}
