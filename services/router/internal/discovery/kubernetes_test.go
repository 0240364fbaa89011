package discovery

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// testPorts are the ports of the slices these tests build.
var testPorts = []discoveryv1.EndpointPort{
	{Name: ptr.To("metrics"), Port: ptr.To[int32](9090)},
	{Name: ptr.To("http"), Port: ptr.To[int32](8000), Protocol: ptr.To(corev1.ProtocolTCP)},
}

// endpointSlice builds a slice labelled for service svc with testPorts.
func endpointSlice(ns, name, svc string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
		Ports:       slices.Clone(testPorts),
	}
}

// endpoint builds an endpoint for pod at ip with the given conditions
// (nil: unset).
func endpoint(ip, pod string, ready, terminating *bool) discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{
		Addresses:  []string{ip},
		Conditions: discoveryv1.EndpointConditions{Ready: ready, Terminating: terminating},
	}
	if pod != "" {
		ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: pod}
	}
	return ep
}

var (
	yes = ptr.To(true)
	no  = ptr.To(false)
)

func TestKubernetesTargets(t *testing.T) {
	tests := []struct {
		name   string
		port   string
		scheme string
		slices []*discoveryv1.EndpointSlice
		want   []Target
	}{
		{
			name:   "no slices",
			port:   "http",
			slices: nil,
			want:   targets(),
		},
		{
			name: "conditions",
			port: "http",
			slices: []*discoveryv1.EndpointSlice{endpointSlice("ns", "a", "w",
				endpoint("10.0.0.1", "ready", yes, nil),
				endpoint("10.0.0.2", "ready-unset", nil, nil),
				endpoint("10.0.0.3", "not-ready", no, nil),
				endpoint("10.0.0.4", "terminating", yes, yes),
				endpoint("10.0.0.5", "terminating-not-ready", no, yes),
				endpoint("10.0.0.6", "not-terminating", yes, no),
			)},
			want: targets("http://10.0.0.1:8000 ready", "http://10.0.0.2:8000 ready-unset",
				"http://10.0.0.6:8000 not-terminating"),
		},
		{
			name:   "port by number",
			port:   "9090",
			slices: []*discoveryv1.EndpointSlice{endpointSlice("ns", "a", "w", endpoint("10.0.0.1", "p", nil, nil))},
			want:   targets("http://10.0.0.1:9090 p"),
		},
		{
			name:   "port by name",
			port:   "metrics",
			scheme: "https",
			slices: []*discoveryv1.EndpointSlice{endpointSlice("ns", "a", "w", endpoint("10.0.0.1", "p", nil, nil))},
			want:   targets("https://10.0.0.1:9090 p"),
		},
		{
			name:   "slice without the port",
			port:   "grpc",
			slices: []*discoveryv1.EndpointSlice{endpointSlice("ns", "a", "w", endpoint("10.0.0.1", "p", nil, nil))},
			want:   targets(),
		},
		{
			name: "unnamed port, UDP and portless entries skipped",
			port: "",
			slices: []*discoveryv1.EndpointSlice{func() *discoveryv1.EndpointSlice {
				s := endpointSlice("ns", "a", "w", endpoint("10.0.0.1", "p", nil, nil))
				s.Ports = []discoveryv1.EndpointPort{
					{Name: ptr.To(""), Port: ptr.To[int32](53), Protocol: ptr.To(corev1.ProtocolUDP)},
					{Name: ptr.To("")},
					{Port: ptr.To[int32](8080)},
				}
				return s
			}()},
			want: targets("http://10.0.0.1:8080 p"),
		},
		{
			name: "IPv6, hostname and nameless endpoints, no addresses",
			port: "http",
			slices: []*discoveryv1.EndpointSlice{func() *discoveryv1.EndpointSlice {
				s := endpointSlice("ns", "a", "w",
					endpoint("fd00::1", "", nil, nil),
					endpoint("fd00::2", "", nil, nil),
					discoveryv1.Endpoint{},
				)
				s.AddressType = discoveryv1.AddressTypeIPv6
				s.Endpoints[1].Hostname = ptr.To("worker-0")
				return s
			}()},
			want: targets("http://[fd00::1]:8000", "http://[fd00::2]:8000 worker-0"),
		},
		{
			name: "first address only",
			port: "http",
			slices: []*discoveryv1.EndpointSlice{func() *discoveryv1.EndpointSlice {
				s := endpointSlice("ns", "a", "w", endpoint("10.0.0.1", "p", nil, nil))
				s.Endpoints[0].Addresses = append(s.Endpoints[0].Addresses, "10.0.0.2")
				return s
			}()},
			want: targets("http://10.0.0.1:8000 p"),
		},
		{
			name: "address in two slices counts once, named from the first slice",
			port: "http",
			slices: []*discoveryv1.EndpointSlice{
				endpointSlice("ns", "b", "w", endpoint("10.0.0.1", "from-b", nil, nil), endpoint("10.0.0.3", "c", nil, nil)),
				endpointSlice("ns", "a", "w", endpoint("10.0.0.1", "from-a", nil, nil), endpoint("10.0.0.2", "d", nil, nil)),
			},
			want: targets("http://10.0.0.1:8000 from-a", "http://10.0.0.2:8000 d", "http://10.0.0.3:8000 c"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := NewKubernetes(KubernetesConfig{
				Client: fake.NewClientset(), Namespace: "ns", Selector: "app=w", Port: tt.port, Scheme: tt.scheme,
			})
			if err != nil {
				t.Fatal(err)
			}
			objs := []any{"not a slice"}
			for _, s := range tt.slices {
				objs = append(objs, s)
			}
			if got := k.targets(objs); !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNewKubernetes(t *testing.T) {
	client := fake.NewClientset()
	tests := []struct {
		name    string
		cfg     KubernetesConfig
		wantErr string
	}{
		{name: "ok", cfg: KubernetesConfig{Client: client, Namespace: "ns", Selector: "kubernetes.io/service-name=w", Port: "http"}},
		{name: "no client", cfg: KubernetesConfig{Namespace: "ns", Selector: "a=b"}, wantErr: "client is nil"},
		{name: "no namespace", cfg: KubernetesConfig{Client: client, Selector: "a=b"}, wantErr: "namespace is empty"},
		{name: "no selector", cfg: KubernetesConfig{Client: client, Namespace: "ns"}, wantErr: "selector is empty"},
		{name: "bad selector", cfg: KubernetesConfig{Client: client, Namespace: "ns", Selector: "=b"}, wantErr: "selector"},
		{name: "port zero", cfg: KubernetesConfig{Client: client, Namespace: "ns", Selector: "a=b", Port: "0"}, wantErr: "out of range"},
		{name: "bad scheme", cfg: KubernetesConfig{Client: client, Namespace: "ns", Selector: "a=b", Scheme: "tcp"}, wantErr: "want http or https"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewKubernetes(tt.cfg)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("got err %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("got err %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}
