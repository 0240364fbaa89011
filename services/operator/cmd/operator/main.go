// Command operator runs the warmpath operator: it reconciles
// InferenceEndpointConfig resources into vLLM+LMCache workers, the router
// and their cache wiring.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/warmpath/warmpath/libs/telemetry"
	"github.com/warmpath/warmpath/services/operator/internal/controller"
)

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "operator:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	metricsAddr := fs.String("metrics-bind-address", ":8080", "address of the /metrics endpoint (0 disables it)")
	probeAddr := fs.String("health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	leaderElect := fs.Bool("leader-elect", true, "elect a leader so only one replica reconciles")
	leaderNS := fs.String("leader-election-namespace", "", "namespace of the leader election Lease (default: the pod's)")
	var o controller.Options
	fs.StringVar(&o.RouterImage, "router-image", "warmpath/router:dev", "router image for endpoints with intelligent routing")
	fs.StringVar(&o.SimulatorImage, "simulator-image", "warmpath/vllm-sim:dev", "vllm-sim image for simulated endpoints")
	fs.StringVar(&o.ModelFetchImage, "model-fetch-image", "warmpath/model-fetch:dev", "model-fetch image, the init container copying an s3 model source into the workers' model volume")
	fs.IntVar(&o.CacheServerPort, "cache-server-port", 65432, "host port of the node-local tiered-storage cache server (lm://)")
	fs.StringVar(&o.CacheServerDaemonSet, "cache-server-daemonset", "", "namespace/name of the tiered-storage cache server DaemonSet; CacheReady follows it when set")
	fs.StringVar(&o.CacheServerDNS, "cache-server-dns", "", "a DNS name resolving to every tiered-storage cache server (the chart's headless <name>-peers Service); when set, the routers of tieredstorage endpoints follow the servers' own KV events for exact L2 knowledge")
	fs.IntVar(&o.CacheServerSnapshotPort, "cache-server-snapshot-port", 5558, "with --cache-server-dns: the cache servers' --kv-events-snapshot-listen port")
	fs.IntVar(&o.CacheServerEventsPort, "cache-server-events-port", 5557, "with --cache-server-dns: the cache servers' --kv-events-endpoint port")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "json", "json or text")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	for _, p := range []struct {
		name string
		port int
	}{{"--cache-server-port", o.CacheServerPort}, {"--cache-server-snapshot-port", o.CacheServerSnapshotPort}, {"--cache-server-events-port", o.CacheServerEventsPort}} {
		if p.port < 1 || p.port > 65535 {
			return fmt.Errorf("%s %d: want 1..65535", p.name, p.port)
		}
	}
	log, err := telemetry.NewLogger(os.Stderr, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))

	scheme := runtime.NewScheme()
	if err := controller.AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   controller.CacheOptions(),
		Metrics:                 metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress:  *probeAddr,
		LeaderElection:          *leaderElect,
		LeaderElectionID:        "operator.inference.warmpath.io",
		LeaderElectionNamespace: *leaderNS,
		// Stepping down ends the process, so a new leader never races a
		// reconcile still in flight.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	r := &controller.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: scheme, Recorder: mgr.GetEventRecorder("warmpath-operator"), Options: o}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	log.Info("operator starting", "routerImage", o.RouterImage, "simulatorImage", o.SimulatorImage, "modelFetchImage", o.ModelFetchImage, "leaderElection", *leaderElect)
	return mgr.Start(ctx)
}
