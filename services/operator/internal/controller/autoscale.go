package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

// ScaledObjectGVK is KEDA's ScaledObject. Like the ServiceMonitor, it is
// written unstructured: the operator does not import KEDA's Go module
// (its API package pulls in most of KEDA), it checks at run time whether
// the CRD is served.
var ScaledObjectGVK = schema.GroupVersionKind{Group: "keda.sh", Version: "v1alpha1", Kind: "ScaledObject"}

// The metric names the autoscalers read: vLLM's own, and the router's.
const (
	metricWaiting = "vllm:num_requests_waiting"
	metricKVUsage = "vllm:kv_cache_usage_perc"
	// metricRouterTTFTP90 is the External metric name the HPA path asks
	// the metrics adapter for; its rule computes it from the router's
	// warmpath_router_ttft_seconds histogram (docs/operator.md).
	metricRouterTTFTP90 = "warmpath_router_ttft_seconds_p90"
	// ttftWindow is the rate window of the TTFT quantile: long enough to
	// hold several scrapes, short enough to follow a burst.
	ttftWindow = "2m"
	// defaultTriggerName is a prometheusTrigger's External metric name on
	// the HPA path when the trigger has none.
	defaultTriggerName = "prometheus_trigger"
)

// replicasHandoverOwner is the field manager that keeps the worker
// Deployment's replicas while ownership passes from the operator to an
// autoscaler. Omitting a field from a server-side apply removes it when no
// other manager owns it, and a Deployment without replicas defaults to 1:
// handing over first keeps the count (the documented "transferring
// ownership" recipe of server-side apply). The autoscaler's first change
// of the count drops this manager.
const replicasHandoverOwner = "warmpath-operator-replicas-handover"

func autoscaling(iec *v1alpha1.InferenceEndpointConfig) *v1alpha1.AutoScalingSpec {
	return iec.Spec.AutoScalingSpec
}

// autoscaleName names the HPA or ScaledObject: the workers they scale.
func autoscaleName(iec *v1alpha1.InferenceEndpointConfig) string { return workerName(iec) }

// autoscaleBounds are the replica bounds an autoscaler of the given kind
// can keep: an HPA cannot scale to zero (HPAScaleToZero is an alpha
// feature gate, off in every managed cluster), so it keeps one.
func autoscaleBounds(as *v1alpha1.AutoScalingSpec, keda bool) (lo, hi int32) {
	lo, hi = int32Or(as.MinReplicaCount, 1), int32Or(as.MaxReplicaCount, 5)
	if !keda && lo < 1 {
		lo = 1
	}
	if hi < lo {
		hi = lo
	}
	return lo, hi
}

// endpointSelector is the PromQL label matcher of one endpoint's series:
// the ServiceMonitors the operator writes label every target with its
// namespace and, in endpoint, the InferenceEndpointConfig's name.
func endpointSelector(iec *v1alpha1.InferenceEndpointConfig) string {
	return fmt.Sprintf(`namespace=%q,endpoint=%q`, iec.Namespace, iec.Name)
}

// workerDeploymentRef is what both autoscalers scale.
func workerDeploymentRef(iec *v1alpha1.InferenceEndpointConfig) autoscalingv2.CrossVersionObjectReference {
	return autoscalingv2.CrossVersionObjectReference{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "Deployment", Name: workerName(iec)}
}

// behavior is the HPA's scaling behaviour from the stabilisation windows;
// KEDA passes the same object to the HPA it creates.
func behavior(as *v1alpha1.AutoScalingSpec) *autoscalingv2.HorizontalPodAutoscalerBehavior {
	return &autoscalingv2.HorizontalPodAutoscalerBehavior{
		ScaleUp:   &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To(int32Or(as.ScaleUpStabilizationTime, 0))},
		ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To(int32Or(as.ScaleDownStabilizationTime, 300))},
	}
}

// hpa is the autoscaling/v2 HorizontalPodAutoscaler of the workers. Its
// metrics come from the custom and external metrics APIs, which a metrics
// adapter (prometheus-adapter) serves from Prometheus: vLLM's gauges as
// Pods metrics under their own names, the router's TTFT quantile and a
// prometheusTrigger as External metrics.
func hpa(iec *v1alpha1.InferenceEndpointConfig) *autoscalingv2.HorizontalPodAutoscaler {
	as := autoscaling(iec)
	lo, hi := autoscaleBounds(as, false)
	var metrics []autoscalingv2.MetricSpec
	podsMetric := func(name string, avg resource.Quantity) autoscalingv2.MetricSpec {
		return autoscalingv2.MetricSpec{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
			Metric: autoscalingv2.MetricIdentifier{Name: name},
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: &avg},
		}}
	}
	if t := as.Targets; t != nil {
		if t.WaitingRequestsPerWorker != nil {
			metrics = append(metrics, podsMetric(metricWaiting, *resource.NewQuantity(int64(*t.WaitingRequestsPerWorker), resource.DecimalSI)))
		}
		if t.KVCacheUsagePercent != nil {
			// vLLM publishes the used fraction, 0..1.
			metrics = append(metrics, podsMetric(metricKVUsage, *resource.NewMilliQuantity(int64(*t.KVCacheUsagePercent)*10, resource.DecimalSI)))
		}
		if t.RouterTTFTMilliseconds != nil {
			metrics = append(metrics, autoscalingv2.MetricSpec{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: metricRouterTTFTP90, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"endpoint": iec.Name}}},
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: resource.NewMilliQuantity(int64(*t.RouterTTFTMilliseconds), resource.DecimalSI)},
			}})
		}
	}
	if p := as.PrometheusTrigger; p != nil {
		name := p.Name
		if name == "" {
			name = defaultTriggerName
		}
		target := autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: floatQuantity(p.TargetValue)}
		if p.MetricType == v1alpha1.MetricTypeValue {
			target = autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: floatQuantity(p.TargetValue)}
		}
		metrics = append(metrics, autoscalingv2.MetricSpec{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
			Metric: autoscalingv2.MetricIdentifier{Name: name}, Target: target,
		}})
	}
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: objectMeta(iec, autoscaleName(iec), componentWorker),
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: workerDeploymentRef(iec),
			MinReplicas:    ptr.To(lo),
			MaxReplicas:    hi,
			Metrics:        metrics,
			Behavior:       behavior(as),
		},
	}
}

// floatQuantity is v as a quantity, to the thousandth (the HPA's own
// precision).
func floatQuantity(v float64) *resource.Quantity {
	return resource.NewMilliQuantity(int64(v*1000+0.5), resource.DecimalSI)
}

// kedaTrigger is one prometheus trigger of a ScaledObject.
type kedaTrigger struct {
	name, metricType, query string
	threshold               float64
	extra                   map[string]any // more metadata
	useCached               *bool
}

// kedaTriggers are the ScaledObject's prometheus triggers. Each query ends
// in "or vector(0)": with no traffic a rate or quantile has no sample
// (or NaN, which "> 0" drops), and KEDA reports an empty result as an
// error rather than as no load.
func kedaTriggers(iec *v1alpha1.InferenceEndpointConfig) []kedaTrigger {
	as := autoscaling(iec)
	sel := endpointSelector(iec)
	var ts []kedaTrigger
	if t := as.Targets; t != nil {
		if t.WaitingRequestsPerWorker != nil {
			// The endpoint's whole queue, divided by the workers
			// (AverageValue): the same target as the HPA's Pods metric.
			ts = append(ts, kedaTrigger{name: "waiting-requests", metricType: "AverageValue",
				query: fmt.Sprintf(`sum(%s{%s}) or vector(0)`, metricWaiting, sel), threshold: float64(*t.WaitingRequestsPerWorker)})
		}
		if t.KVCacheUsagePercent != nil {
			ts = append(ts, kedaTrigger{name: "kv-cache-usage", metricType: "Value",
				query: fmt.Sprintf(`avg(%s{%s}) or vector(0)`, metricKVUsage, sel), threshold: float64(*t.KVCacheUsagePercent) / 100})
		}
		if t.RouterTTFTMilliseconds != nil {
			ts = append(ts, kedaTrigger{name: "router-ttft-p90", metricType: "Value",
				query:     fmt.Sprintf(`histogram_quantile(0.9, sum by (le) (rate(warmpath_router_ttft_seconds_bucket{%s}[%s]))) > 0 or vector(0)`, sel, ttftWindow),
				threshold: float64(*t.RouterTTFTMilliseconds) / 1000})
		}
	}
	if p := as.PrometheusTrigger; p != nil {
		mt := "AverageValue"
		if p.MetricType == v1alpha1.MetricTypeValue {
			mt = "Value"
		}
		extra := map[string]any{}
		if p.ServerAddress != "" {
			extra["serverAddress"] = p.ServerAddress
		}
		if p.Namespace != "" {
			extra["namespace"] = p.Namespace
		}
		if p.CustomHeaders != "" {
			extra["customHeaders"] = p.CustomHeaders
		}
		name := p.Name
		if name == "" {
			name = defaultTriggerName
		}
		ts = append(ts, kedaTrigger{name: name, metricType: mt, query: p.Query, threshold: p.TargetValue, extra: extra, useCached: p.UseCachedMetrics})
	}
	return ts
}

// kedaAddressMissing names the first trigger with no Prometheus to query.
func kedaAddressMissing(iec *v1alpha1.InferenceEndpointConfig) string {
	as := autoscaling(iec)
	if as.PrometheusServerAddress != "" {
		return ""
	}
	for _, t := range kedaTriggers(iec) {
		if _, ok := t.extra["serverAddress"]; !ok {
			return t.name
		}
	}
	return ""
}

// scaledObject is KEDA's ScaledObject of the workers: KEDA queries
// Prometheus itself and serves the values to the HPA it creates, so it
// needs no metrics adapter, only a Prometheus that scrapes the workers
// (and the router for the TTFT target).
func scaledObject(iec *v1alpha1.InferenceEndpointConfig) *unstructured.Unstructured {
	as := autoscaling(iec)
	lo, hi := autoscaleBounds(as, true)
	var triggers []any
	for _, t := range kedaTriggers(iec) {
		md := map[string]any{
			"serverAddress": as.PrometheusServerAddress,
			"query":         t.query,
			"threshold":     strconv.FormatFloat(t.threshold, 'f', -1, 64),
		}
		for k, v := range t.extra {
			md[k] = v
		}
		tr := map[string]any{"type": "prometheus", "name": t.name, "metricType": t.metricType, "metadata": md}
		if t.useCached != nil {
			tr["useCachedMetrics"] = *t.useCached
		}
		triggers = append(triggers, tr)
	}
	b := behavior(as)
	ref := workerDeploymentRef(iec)
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ScaledObjectGVK)
	u.SetName(autoscaleName(iec))
	u.SetNamespace(iec.Namespace)
	u.SetLabels(labels(iec, componentWorker))
	u.Object["spec"] = map[string]any{
		"scaleTargetRef":        map[string]any{"apiVersion": ref.APIVersion, "kind": ref.Kind, "name": ref.Name},
		"minReplicaCount":       int64(lo),
		"maxReplicaCount":       int64(hi),
		"pollingInterval":       int64(int32Or(as.PollingInterval, 30)),
		"cooldownPeriod":        int64(int32Or(as.CooldownPeriod, 300)),
		"initialCooldownPeriod": int64(int32Or(as.InitialCooldownPeriod, 300)),
		"advanced": map[string]any{"horizontalPodAutoscalerConfig": map[string]any{"behavior": map[string]any{
			"scaleUp":   map[string]any{"stabilizationWindowSeconds": int64(*b.ScaleUp.StabilizationWindowSeconds)},
			"scaleDown": map[string]any{"stabilizationWindowSeconds": int64(*b.ScaleDown.StabilizationWindowSeconds)},
		}}},
		"triggers": triggers,
	}
	return u
}

// applyAutoscaler writes the autoscaler autoScalingSpec asks for, a
// ScaledObject where KEDA is installed (looked up on every reconcile, so
// installing KEDA later switches over) and an HPA otherwise, and marks
// the other, and both without autoScalingSpec, unwanted. The condition
// is nil without autoScalingSpec.
func (r *Reconciler) applyAutoscaler(ctx context.Context, iec *v1alpha1.InferenceEndpointConfig, keda bool, unwanted *[]client.Object) (*metav1.Condition, error) {
	hpaShell := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: iec.Namespace, Name: autoscaleName(iec)}}
	soShell := &unstructured.Unstructured{}
	soShell.SetGroupVersionKind(ScaledObjectGVK)
	soShell.SetNamespace(iec.Namespace)
	soShell.SetName(autoscaleName(iec))
	as := autoscaling(iec)
	if as == nil {
		*unwanted = append(*unwanted, hpaShell, soShell)
		return nil, nil
	}
	cond := &metav1.Condition{Type: v1alpha1.ConditionAutoscalingReady, ObservedGeneration: iec.Generation}
	if !keda {
		*unwanted = append(*unwanted, soShell)
		if err := r.apply(ctx, iec, hpa(iec)); err != nil {
			return nil, err
		}
		lo, hi := autoscaleBounds(as, false)
		cond.Status, cond.Reason = metav1.ConditionTrue, "HorizontalPodAutoscaler"
		cond.Message = fmt.Sprintf("HorizontalPodAutoscaler %s scales the workers between %d and %d; it reads its metrics from the "+
			"custom.metrics.k8s.io and external.metrics.k8s.io APIs, which a metrics adapter (prometheus-adapter with the rules in "+
			"docs/operator.md) must serve; `kubectl -n %s describe hpa %s` shows whether it gets them", autoscaleName(iec), lo, hi, iec.Namespace, autoscaleName(iec))
		if as.ScaleToZero && int32Or(as.MinReplicaCount, 1) == 0 {
			cond.Message += "; an HPA cannot scale to zero, so it keeps 1 worker: install KEDA to scale to zero"
		}
		return cond, nil
	}
	*unwanted = append(*unwanted, hpaShell)
	if missing := kedaAddressMissing(iec); missing != "" {
		*unwanted = append(*unwanted, soShell)
		cond.Status, cond.Reason = metav1.ConditionFalse, "PrometheusAddressMissing"
		cond.Message = fmt.Sprintf("KEDA is installed but trigger %s has no Prometheus to query: set autoScalingSpec.prometheusServerAddress "+
			"(or prometheusTrigger.serverAddress); no autoscaler was written and the workers keep their current count", missing)
		return cond, nil
	}
	if err := r.apply(ctx, iec, scaledObject(iec)); err != nil {
		return nil, err
	}
	lo, hi := autoscaleBounds(as, true)
	cond.Status, cond.Reason = metav1.ConditionTrue, "KEDAScaledObject"
	cond.Message = fmt.Sprintf("KEDA ScaledObject %s scales the workers between %d and %d on Prometheus queries; the Prometheus it queries "+
		"must scrape the workers (and the router, for routerTTFTMilliseconds), e.g. through the operator's ServiceMonitors; "+
		"`kubectl -n %s describe scaledobject %s` shows whether KEDA reads them", autoscaleName(iec), lo, hi, iec.Namespace, autoscaleName(iec))
	return cond, nil
}

// handOverReplicas passes the worker Deployment's replicas to an
// autoscaler without a jolt. While the operator still owns the field
// (autoscaling was just turned on), replicasHandoverOwner takes a share of
// it at its current value, so the operator's next apply, which omits it,
// leaves it be. Where nobody owns it (a Deployment just created without
// it, at the API's default of 1), replicasHandoverOwner sets it within
// the autoscaler's bounds, so the autoscaler starts from its minimum. It
// reads the Deployment from the API server, not the cache: a stale count
// would be applied, and a conflict lose the field.
func (r *Reconciler) handOverReplicas(ctx context.Context, iec *v1alpha1.InferenceEndpointConfig, keda bool) error {
	var d appsv1.Deployment
	if err := r.uncached().Get(ctx, client.ObjectKey{Namespace: iec.Namespace, Name: workerName(iec)}, &d); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading the worker Deployment to hand its replicas to the autoscaler: %w", err)
	}
	owners, err := replicasOwners(&d)
	if err != nil {
		return err
	}
	want := ptr.Deref(d.Spec.Replicas, 1)
	switch {
	case slices.Contains(owners, FieldOwner):
		// Share it at the current value: a different one would conflict.
	case len(owners) == 0:
		lo, hi := autoscaleBounds(autoscaling(iec), keda)
		want = min(max(want, lo), hi)
	default:
		return nil // an autoscaler (or someone) owns it already
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
	u.SetNamespace(d.Namespace)
	u.SetName(d.Name)
	u.Object["spec"] = map[string]any{"replicas": int64(want)}
	err = r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(replicasHandoverOwner))
	switch {
	case apierrors.IsConflict(err):
		// Another manager set a different count since the read: it owns
		// the field now, which is what the handover is for.
		return nil
	case err != nil:
		return fmt.Errorf("handing the worker Deployment's replicas to the autoscaler: %w", err)
	}
	return nil
}

// replicasOwners are the field managers owning d's spec.replicas (an
// autoscaler's writes through the scale subresource included).
func replicasOwners(d *appsv1.Deployment) ([]string, error) {
	var owners []string
	for _, mf := range d.ManagedFields {
		if mf.FieldsV1 == nil {
			continue
		}
		var fields map[string]map[string]any
		if err := json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fields); err != nil {
			return nil, fmt.Errorf("reading the managed fields of Deployment %s: %w", d.Name, err)
		}
		if _, ok := fields["f:spec"]["f:replicas"]; ok {
			owners = append(owners, mf.Manager)
		}
	}
	return owners, nil
}
