package chart

import (
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// object is the part of a rendered manifest the security tests read.
type object struct {
	Kind     string         `json:"kind"`
	Metadata objectMetadata `json:"metadata"`
	Raw      map[string]any `json:"-"`
}

type objectMetadata struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	Labels    map[string]string `json:"labels"`
}

// objects splits a rendered stream into documents, keeping each one both
// as object and as a generic map for the field a test digs out.
func objects(t *testing.T, stream string) []object {
	t.Helper()
	var out []object
	for _, doc := range strings.Split(stream, "\n---") {
		doc = strings.TrimPrefix(doc, "---")
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("document is not YAML: %v\n%s", err, doc)
		}
		if err := yaml.Unmarshal([]byte(doc), &o.Raw); err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	return out
}

func renderProfile(t *testing.T, file string) []object {
	t.Helper()
	out, err := render(t, loadValues(t, file))
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return objects(t, out)
}

// TestOperatorRBACLeastPrivilege: the operator's ClusterRole holds no verb
// that lets it grant more than it holds itself. It creates the router's
// Role, which Kubernetes allows without escalate because the operator holds
// every permission that Role grants (endpointslices get/list/watch); and
// binds it, which needs no bind verb for the same reason. Whether the
// operator still works under exactly these rules is
// TestInstallOnAPIServer's to prove.
func TestOperatorRBACLeastPrivilege(t *testing.T) {
	forbidden := []string{"bind", "escalate", "impersonate", "*"}
	var found bool
	for _, o := range renderProfile(t, "") {
		if o.Kind != "ClusterRole" && o.Kind != "Role" {
			continue
		}
		found = found || o.Kind == "ClusterRole"
		rules, _ := o.Raw["rules"].([]any)
		for _, r := range rules {
			rule := r.(map[string]any)
			for _, v := range rule["verbs"].([]any) {
				if slices.Contains(forbidden, v.(string)) {
					t.Errorf("%s %s grants %q on %v", o.Kind, o.Metadata.Name, v, rule["resources"])
				}
			}
			for _, res := range rule["resources"].([]any) {
				if res == "*" || res == "secrets" {
					t.Errorf("%s %s grants %v on %q", o.Kind, o.Metadata.Name, rule["verbs"], res)
				}
			}
		}
	}
	if !found {
		t.Fatal("no ClusterRole rendered")
	}
}
