package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/warmpath/warmpath/libs/testcert"
	"github.com/warmpath/warmpath/tests/harness"
)

// testRouterTLSAndKeys: given a TLS Secret and an API-key Secret
// (intelligentRoutingSpec.tlsSecretName, apiKeySecretRef), the endpoint is
// served over TLS on 443 — the kubelet probing the routers over HTTPS —
// to clients holding one of the keys, and its status URL says https;
// taking them away brings plain HTTP on 80 back for the steps after.
func testRouterTLSAndKeys(ctx context.Context, t *testing.T, e *env) {
	f := testcert.Write(t, "sim-llama-router")
	read := func(p string) []byte {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "router-tls"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: read(f.Cert), corev1.TLSPrivateKeyKey: read(f.Key)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "router-keys"}, Data: map[string][]byte{"keys": []byte("# e2e\nkey-one\nkey-two\n")}},
	} {
		if _, err := e.c.cs.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("Secret %s: %v", s.Name, err)
		}
		// The release's namespace must hold nothing of this step's once
		// the chart is uninstalled (HelmTestUpgradeUninstall checks).
		defer func() {
			if err := e.c.cs.CoreV1().Secrets(ns).Delete(context.WithoutCancel(ctx), s.Name, metav1.DeleteOptions{}); err != nil {
				t.Errorf("delete Secret %s: %v", s.Name, err)
			}
		}()
	}
	e.c.patchEndpoint(ctx, t, `{"spec":{"intelligentRoutingSpec":{"tlsSecretName":"router-tls","apiKeySecretRef":{"name":"router-keys","key":"keys"}}}}`)

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(read(f.CA))
	// The certificate names localhost; the client reaches the Service's
	// ClusterIP and checks the name it was issued for.
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var base string
	ask := func(key string) error {
		_, err := complete(ctx, newClient(base, option.WithAPIKey(key), option.WithHTTPClient(hc)), "over TLS through the Service", false)
		return err
	}
	start := time.Now()
	eventually(ctx, t, 3*time.Minute, "the endpoint served over TLS with a key", func() error {
		base = strings.Replace(e.c.serviceURL(ctx, t, ns, endpoint), "http://", "https://", 1)
		if !strings.HasSuffix(base, ":443") {
			return fmt.Errorf("the Service is at %s, not yet on 443", base)
		}
		pods, _ := e.routerPods(ctx, t)
		for _, p := range pods {
			if !strings.Contains(strings.Join(p.Spec.Containers[0].Args, " "), "--tls-cert-file") {
				return fmt.Errorf("router pod %s still serves plain HTTP", p.Name)
			}
		}
		return ask("key-one")
	})
	t.Logf("TLS and keys on every router %s after the patch; Service %s", time.Since(start).Round(time.Second), base)
	if err := ask("key-two"); err != nil {
		t.Errorf("the second key: %v", err)
	}
	var apiErr *openai.Error
	if err := ask("not-a-key"); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong key: %v, want 401", err)
	}
	u, err := e.c.dyn.Resource(iecGVR).Namespace(ns).Get(ctx, endpoint, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if status, _, _ := unstructured.NestedString(u.Object, "status", "url"); !strings.HasPrefix(status, "https://") {
		t.Errorf("status URL %q, want https", status)
	}

	e.c.patchEndpoint(ctx, t, `{"spec":{"intelligentRoutingSpec":{"tlsSecretName":null,"apiKeySecretRef":null}}}`)
	eventually(ctx, t, 3*time.Minute, "plain HTTP back on every router", func() error {
		pods, urls := e.routerPods(ctx, t)
		for i, p := range pods {
			if strings.Contains(strings.Join(p.Spec.Containers[0].Args, " "), "--tls-cert-file") {
				return fmt.Errorf("router pod %s still serves TLS", p.Name)
			}
			if _, err := harness.GetBody(ctx, urls[i]+"/ready"); err != nil {
				return err
			}
		}
		_, err := harness.GetBody(ctx, e.router+"/ready")
		return err
	})
}
