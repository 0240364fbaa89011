package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// KubernetesConfig configures a Kubernetes source.
type KubernetesConfig struct {
	// Client talks to the API server. Required.
	Client kubernetes.Interface
	// Namespace holds the EndpointSlices. Required.
	Namespace string
	// Selector is the EndpointSlices' label selector, typically
	// kubernetes.io/service-name=<service>. Required: an empty selector
	// would route to every Service in the namespace.
	Selector string
	// Port picks the worker port from each slice's ports: a number
	// ("8000") matches the port with that number, anything else the port
	// with that name; "" is the unnamed port of a single-port Service.
	// Slices without the port contribute no targets.
	Port string
	// Scheme is the workers' URL scheme, "http" (default) or "https".
	Scheme string
	// Log receives watch failures and panics (default slog.Default()).
	Log *slog.Logger
}

// Kubernetes is a Source over the EndpointSlices (discovery.k8s.io/v1) that
// a label selector picks in one namespace, watched through a client-go
// informer filtered server-side by namespace and selector. A target is an
// endpoint whose conditions.ready is true or unset (as kube-proxy reads it)
// and that is not terminating, on the configured port; its URL is
// scheme://<first address>:<port> and its Name the targetRef's name (else
// the endpoint's hostname). Addresses listed by several slices (as during a
// slice rebalance) count once.
//
// The set is recomputed from the informer's whole store after every add,
// update and delete notification, never patched from a single event, so
// what a relist after a broken watch removes (delivered as a
// DeletedFinalStateUnknown tombstone) leaves rotation exactly like a watched
// delete, and no endpoint outlives its slice. The first set is reported
// once the initial list is in; later ones only when the set changed.
// Create it with NewKubernetes.
type Kubernetes struct {
	cfg      KubernetesConfig
	port     int32 // matched by number when > 0, else by cfg.Port as a name
	selector string
}

var _ Source = (*Kubernetes)(nil)

// NewKubernetes validates cfg and returns the source. It does not contact
// the API server; Run does.
func NewKubernetes(cfg KubernetesConfig) (*Kubernetes, error) {
	if cfg.Client == nil {
		return nil, errors.New("discovery: kubernetes client is nil")
	}
	if cfg.Namespace == "" {
		return nil, errors.New("discovery: kubernetes namespace is empty")
	}
	sel, err := labels.Parse(cfg.Selector)
	if err != nil {
		return nil, fmt.Errorf("discovery: kubernetes selector %q: %w", cfg.Selector, err)
	}
	if sel.Empty() {
		return nil, errors.New("discovery: kubernetes selector is empty; use e.g. kubernetes.io/service-name=<service>")
	}
	switch cfg.Scheme {
	case "":
		cfg.Scheme = "http"
	case "http", "https":
	default:
		return nil, fmt.Errorf("discovery: kubernetes scheme %q: want http or https", cfg.Scheme)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	k := &Kubernetes{cfg: cfg, selector: sel.String()}
	if n, err := strconv.Atoi(cfg.Port); err == nil {
		if n < 1 || n > 65535 {
			return nil, fmt.Errorf("discovery: kubernetes port %d out of range 1-65535", n)
		}
		k.port = int32(n)
	}
	return k, nil
}

// Run watches the EndpointSlices until ctx ends, calling update as
// described on Kubernetes, and returns nil then. update is called from
// Run's goroutine only. It returns an error only if the informer panics.
func (k *Kubernetes) Run(ctx context.Context, update func([]Target)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	inf := discoveryinformers.NewFilteredEndpointSliceInformer(k.cfg.Client, k.cfg.Namespace, 0,
		cache.Indexers{}, func(o *metav1.ListOptions) { o.LabelSelector = k.selector })
	if err := inf.SetWatchErrorHandlerWithContext(k.watchError); err != nil {
		return fmt.Errorf("discovery: %w", err)
	}
	// Handlers only wake the loop below; a burst of events costs one
	// recomputation, and update is never called concurrently.
	dirty := make(chan struct{}, 1)
	wake := func() {
		select {
		case dirty <- struct{}{}:
		default:
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { wake() },
		UpdateFunc: func(any, any) { wake() },
		DeleteFunc: func(obj any) {
			// A relist reports slices deleted while the watch was down
			// as tombstones; the store no longer holds them either way.
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				k.cfg.Log.Debug("discovery: EndpointSlice deleted while the watch was down", "key", t.Key)
			}
			wake()
		},
	})
	if err != nil {
		return fmt.Errorf("discovery: %w", err)
	}

	// The informer runs until Run returns; a panic in it is logged and
	// ends Run with an error instead of the process.
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	panicked := make(chan error, 1)
	wg.Go(func() {
		defer func() {
			if r := recover(); r != nil {
				k.cfg.Log.Error("discovery: EndpointSlice informer panicked", "panic", r)
				panicked <- fmt.Errorf("discovery: EndpointSlice informer panicked: %v", r)
				cancel()
			}
		}()
		inf.RunWithContext(ctx)
	})
	// stopped is Run's result once ctx is done: the panic, if that was
	// the cause (it is sent before cancel), else nil.
	stopped := func() error {
		select {
		case err := <-panicked:
			return err
		default:
			return nil
		}
	}

	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		return stopped()
	}
	var filter changeFilter
	for {
		ts := k.targets(inf.GetStore().List())
		if filter.changed(ts) {
			update(slices.Clone(ts))
		}
		select {
		case <-ctx.Done():
			return stopped()
		case <-dirty:
		}
	}
}

// watchError logs a failed list or watch; the reflector retries with
// backoff and relists. An expired resource version (410) is routine.
func (k *Kubernetes) watchError(ctx context.Context, _ *cache.Reflector, err error) {
	level := slog.LevelWarn
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		level = slog.LevelInfo
	}
	k.cfg.Log.Log(ctx, level, "discovery: EndpointSlice list/watch failed; relisting",
		"namespace", k.cfg.Namespace, "selector", k.selector, "err", err)
}

// targets computes the sorted, de-duplicated target set from objs, the
// informer store's EndpointSlices. Other objects are ignored.
func (k *Kubernetes) targets(objs []any) []Target {
	sl := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok {
			sl = append(sl, s)
		}
	}
	// Visit slices in name order so a duplicated address always takes its
	// Name from the same slice.
	slices.SortFunc(sl, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	seen := make(map[string]bool)
	ts := []Target{}
	for _, s := range sl {
		port, ok := k.slicePort(s)
		if !ok {
			continue
		}
		for i := range s.Endpoints {
			ep := &s.Endpoints[i]
			if !serving(ep) || len(ep.Addresses) == 0 {
				continue
			}
			// Consumers use only the first address; the API says the
			// others are interchangeable (and kube-proxy does the same).
			u := hostURL(k.cfg.Scheme, ep.Addresses[0], int(port))
			if seen[u] {
				continue
			}
			seen[u] = true
			ts = append(ts, Target{URL: u, Name: endpointName(ep)})
		}
	}
	sortTargets(ts)
	return ts
}

// slicePort returns the configured TCP port of s, if s has it.
func (k *Kubernetes) slicePort(s *discoveryv1.EndpointSlice) (int32, bool) {
	for _, p := range s.Ports {
		if p.Port == nil || (p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP) {
			continue
		}
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		if (k.port > 0 && *p.Port == k.port) || (k.port == 0 && name == k.cfg.Port) {
			return *p.Port, true
		}
	}
	return 0, false
}

// serving reports whether ep should receive traffic: ready (nil counts as
// ready, as kube-proxy reads it) and not terminating.
func serving(ep *discoveryv1.Endpoint) bool {
	c := ep.Conditions
	return (c.Ready == nil || *c.Ready) && (c.Terminating == nil || !*c.Terminating)
}

// endpointName is the targetRef's name, else the hostname, else "".
func endpointName(ep *discoveryv1.Endpoint) string {
	if ep.TargetRef != nil && ep.TargetRef.Name != "" {
		return ep.TargetRef.Name
	}
	if ep.Hostname != nil {
		return *ep.Hostname
	}
	return ""
}
