package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The model the S3 step serves: a config.json (what vllm-sim, like vLLM,
// needs to find) and weight shards, under a prefix with a sibling whose
// name extends it (which must not be copied).
var s3Model = map[string]int{
	"models/llama/config.json":                      0, // written as JSON below
	"models/llama/model-00001-of-00002.safetensors": 3 << 20,
	"models/llama/model-00002-of-00002.safetensors": 1 << 20,
	"models/llama/tokenizer/tokenizer.json":         64 << 10,
	"models/llama-old/config.json":                  0,
}

// testModelFromS3: an endpoint whose model source is s3 gets its model
// copied into the pod by the model-fetch init container, over the S3 wire
// protocol, from an S3-compatible server (gofakes3) the node's pods reach
// on the node's address; vllm-sim, pointed at the fetched directory, starts
// only because the model's config.json is there, and logs the files it
// found. The simulate-model-fetch annotation keeps the fetch a simulated
// worker otherwise skips.
func testModelFromS3(ctx context.Context, t *testing.T, e *env) {
	const name, bucket = "s3-model", "models"
	backend := s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	var want int64 // bytes under models/llama/
	for key, size := range s3Model {
		body := []byte(`{"architectures":["LlamaForCausalLM"],"model_type":"llama"}`)
		if size > 0 {
			body = make([]byte, size)
			_, _ = rand.Read(body)
		}
		if strings.HasPrefix(key, "models/llama/") {
			want += int64(len(body))
		}
		if _, err := backend.PutObject(bucket, key, nil, bytes.NewReader(body), int64(len(body)), nil); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(e.c.nodeIP, "0")) // pods route to the node's address
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: gofakes3.New(backend).Server(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	endpointURL := "http://" + ln.Addr().String()

	secrets := e.c.cs.CoreV1().Secrets(ns)
	if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-s3"},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": "e2e-access-key", "AWS_SECRET_ACCESS_KEY": "e2e-secret-key"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	iec := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.warmpath.io/v1alpha1", "kind": "InferenceEndpointConfig",
		"metadata": map[string]any{"name": name, "namespace": ns, "annotations": map[string]any{
			"inference.warmpath.io/simulate": "true", "inference.warmpath.io/simulate-model-fetch": "true"}},
		"spec": map[string]any{
			"modelName": "Llama-3.1-8B-Instruct", "replicas": int64(1),
			"modelSourceConfig": map[string]any{
				"modelSourceType": "s3", "modelLocation": "models/llama",
				"s3Storage": map[string]any{"bucketName": bucket, "region": "us-east-1", "endpointUrl": endpointURL,
					"credentialsSecretRef": map[string]any{"name": name + "-s3"}},
			},
			"worker": map[string]any{
				"image":               "warmpath/vllm-sim:dev",
				"resources":           map[string]any{"requests": map[string]any{"cpu": "50m", "memory": "64Mi"}, "limits": map[string]any{"memory": "512Mi"}},
				"modelInvocationPort": map[string]any{"containerPort": int64(8000), "name": "http"},
				"modelVolumeMount":    map[string]any{"name": "model-weights", "mountPath": "/opt/ml/model"},
			},
		},
	}}
	if _, err := e.c.dyn.Resource(iecGVR).Namespace(ns).Create(ctx, iec, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create InferenceEndpointConfig %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		_ = e.c.dyn.Resource(iecGVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{})
		_ = secrets.Delete(ctx, name+"-s3", metav1.DeleteOptions{})
	})

	sel := "inference.warmpath.io/endpoint=" + name + ",app.kubernetes.io/component=worker"
	pods := e.c.waitPodsReady(ctx, t, ns, sel, 1, 4*time.Minute)
	pod := pods[0]
	var fetch *corev1.ContainerStatus
	for i, s := range pod.Status.InitContainerStatuses {
		if s.Name == "model-fetch" {
			fetch = &pod.Status.InitContainerStatuses[i]
		}
	}
	if fetch == nil || fetch.State.Terminated == nil || fetch.State.Terminated.ExitCode != 0 {
		t.Fatalf("pod %s: model-fetch init container %+v, want terminated with exit code 0", pod.Name, fetch)
	}
	fetchLog := podLog(ctx, t, e, pod.Name, "model-fetch")
	if !strings.Contains(fetchLog, "model fetch done") {
		t.Errorf("model-fetch's log has no summary line:\n%s", fetchLog)
	}
	if strings.Contains(fetchLog, "llama-old") {
		t.Errorf("model-fetch copied the sibling prefix models/llama-old/:\n%s", fetchLog)
	}
	// vllm-sim, like vLLM, read the directory before it served.
	workerLog := podLog(ctx, t, e, pod.Name, "vllm")
	line := ""
	for _, l := range strings.Split(workerLog, "\n") {
		if strings.Contains(l, `"model directory"`) {
			line = l
		}
	}
	wantLine := fmt.Sprintf(`"files":%d,"bytes":%d`, 4, want)
	if !strings.Contains(line, wantLine) {
		t.Errorf("worker log's model directory line %q, want %s", line, wantLine)
	}
	t.Logf("pod %s fetched %d bytes from %s: %s", pod.Name, want, endpointURL, line)
}

// podLog is the log of one of a pod's containers.
func podLog(ctx context.Context, t *testing.T, e *env, pod, container string) string {
	t.Helper()
	opts := &corev1.PodLogOptions{Container: container}
	b, err := e.c.cs.CoreV1().Pods(ns).GetLogs(pod, opts).DoRaw(ctx)
	if err != nil {
		var se interface{ Status() metav1.Status }
		if errors.As(err, &se) {
			t.Fatalf("logs of %s/%s: %s", pod, container, se.Status().Message)
		}
		t.Fatalf("logs of %s/%s: %v", pod, container, err)
	}
	return string(b)
}
