package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testRollouts: under an open-loop load of non-streamed requests through
// the endpoint Service, one change to the endpoint rolls the router (new
// args) and the workers (new environment), and adds a worker; then a
// second removes it. Not one request fails: the router drains before it
// stops (readiness fails, connections close after their response, new
// connections are still served until kube-proxy stops sending them), a
// new pod is Ready before an old one goes, and a worker leaves the
// routers' EndpointSlices before it stops serving.
func testRollouts(ctx context.Context, t *testing.T, e *env) {
	oldRouters, _ := e.routerPods(ctx, t)
	oldWorkers := e.c.waitPodsReady(ctx, t, ns, workerSel, 2, 2*time.Minute)
	// 5 a second, at most 16 at once: well within what two simulated
	// workers on this shared node answer, so a failure is the rollout's.
	l := startOpenLoad(ctx, e.router, 5, 16)
	eventually(ctx, t, time.Minute, "load under way", func() error {
		if n := l.ok.Load(); n < 10 {
			return fmt.Errorf("%d requests answered", n)
		}
		return nil
	})
	routerGen, workerGen := e.generation(ctx, t, endpoint+"-router"), e.generation(ctx, t, endpoint+"-worker")
	start := time.Now()
	// kvBytesPerToken reaches the router as --kv-cpu-capacity-tokens (a new
	// pod template, so a rollout); the variable changes the workers' pods.
	e.c.patchEndpoint(ctx, t, `{"spec":{"replicas":3,"kvCacheSpec":{"kvBytesPerToken":131072},`+
		`"worker":{"environmentVariables":[{"name":"WARMPATH_E2E_ROLLOUT","value":"1"}]}}}`)
	e.waitRolledOut(ctx, t, endpoint+"-router", routerGen, 3*time.Minute)
	e.waitRolledOut(ctx, t, endpoint+"-worker", workerGen, 4*time.Minute)
	routers, _ := e.routerPods(ctx, t)
	workers := e.c.waitPodsReady(ctx, t, ns, workerSel, 3, 3*time.Minute)
	if kept := samePods(oldRouters, routers); len(kept) > 0 {
		t.Errorf("router pods %v survived a change of the router's args", kept)
	}
	if kept := samePods(oldWorkers, workers); len(kept) > 0 {
		t.Errorf("worker pods %v survived a change of the workers' environment", kept)
	}
	t.Logf("router and workers rolled, 3 workers, in %s: %d requests answered so far", time.Since(start).Round(time.Second), l.ok.Load())

	workerGen = e.generation(ctx, t, endpoint+"-worker")
	e.c.patchEndpoint(ctx, t, `{"spec":{"replicas":2}}`)
	e.waitRolledOut(ctx, t, endpoint+"-worker", workerGen, 2*time.Minute)
	e.waitRoutersSee(ctx, t, e.workerURLs(ctx, t, 2), 2*time.Minute)
	l.finish(t, "open-loop load through a router rollout, a worker rollout, scaling 2 -> 3 -> 2")
	t.Logf("the whole step under load: %s, %d requests shed by the client's in-flight bound", time.Since(start).Round(time.Second), l.shed.Load())
}

// generation is a Deployment's metadata.generation now.
func (e *env) generation(ctx context.Context, t *testing.T, name string) int64 {
	t.Helper()
	d, err := e.c.cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Deployment %s: %v", name, err)
	}
	return d.Generation
}

// waitRolledOut waits until the operator has changed a Deployment past
// generation since, its controller has seen the change, every replica
// runs it and is available, and no pod of an older one is left, not even
// terminating (a terminating pod may still be answering the load).
func (e *env) waitRolledOut(ctx context.Context, t *testing.T, name string, since int64, timeout time.Duration) {
	t.Helper()
	eventually(ctx, t, timeout, "Deployment "+name+" rolled out", func() error {
		d, err := e.c.cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Generation <= since {
			return fmt.Errorf("generation %d: the operator has not applied the change yet", d.Generation)
		}
		if err := rolledOut(d); err != nil {
			return err
		}
		pods, err := e.c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				return fmt.Errorf("pod %s still terminating", p.Name)
			}
		}
		if len(pods.Items) != int(*d.Spec.Replicas) {
			return fmt.Errorf("%d pods, want %d", len(pods.Items), *d.Spec.Replicas)
		}
		return nil
	})
}

func rolledOut(d *appsv1.Deployment) error {
	want := *d.Spec.Replicas
	s := d.Status
	if s.ObservedGeneration < d.Generation {
		return fmt.Errorf("generation %d not observed yet (%d)", d.Generation, s.ObservedGeneration)
	}
	if s.UpdatedReplicas != want || s.Replicas != want || s.AvailableReplicas != want {
		return fmt.Errorf("%d updated, %d in all, %d available, want %d", s.UpdatedReplicas, s.Replicas, s.AvailableReplicas, want)
	}
	return nil
}

// samePods are the names in both lists.
func samePods(before, after []corev1.Pod) []string {
	var same []string
	for _, p := range after {
		if slices.ContainsFunc(before, func(q corev1.Pod) bool { return q.Name == p.Name }) {
			same = append(same, p.Name)
		}
	}
	return same
}

// startOpenLoad sends non-streamed completions through the router at rate
// per second, whatever the answers' pace (arrivals do not wait for answers,
// as a fleet's clients do not), with at most maxInFlight at once: an
// arrival beyond it is shed and counted, so a stall cannot pile up
// goroutines. One client, so its kept-alive connections are reused across
// requests, as a real client's are.
func startOpenLoad(ctx context.Context, baseURL string, rate, maxInFlight int) *load {
	ctx, cancel := context.WithCancel(ctx)
	l := &load{stop: cancel}
	cl := newClient(baseURL)
	slots := make(chan struct{}, maxInFlight)
	var requests sync.WaitGroup
	l.done.Go(func() {
		defer requests.Wait()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			select {
			case slots <- struct{}{}:
			default:
				l.shed.Add(1)
				continue
			}
			requests.Go(func() {
				defer func() { <-slots }()
				prompt := fmt.Sprintf("%s Rollout question %d.", longPrompt(fmt.Sprint(i%4)), i)
				_, err := complete(ctx, cl, prompt, false)
				l.record(ctx, err)
			})
		}
	})
	return l
}
