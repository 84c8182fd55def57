package main

import (
	"context"
	"path"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/enforcement-io/enforcement/pkg/testenv/compat"
)

// TestExampleRulesApply creates every ClusterRule of the original operator's examples, unchanged,
// and checks the defaults the original applied.
func TestExampleRulesApply(t *testing.T) {
	e := newEnv(t)
	rules := 0
	for i, f := range compat.Files() {
		if !strings.HasPrefix(f, examples) {
			continue
		}
		u := compat.Objects(t, f)[0]
		if u.GetKind() != "ClusterRule" {
			continue
		}
		rules++
		ns := e.kube.Namespace(t, e.ns+"-"+string(rune('a'+i)))
		u.SetNamespace(ns)
		if err := e.c.Create(context.Background(), u); err != nil {
			t.Errorf("%s: %v", path.Base(f), err)
			continue
		}
		enfs, _, _ := unstructured.NestedSlice(u.Object, "spec", "enforcements")
		for _, en := range enfs {
			if ns, _ := en.(map[string]any)["namespace"].(string); ns == "" {
				t.Errorf("%s: enforcement namespace not defaulted: %v", path.Base(f), en)
			}
		}
		if _, ok, _ := unstructured.NestedMap(u.Object, "spec", "triggers"); ok {
			before, _, _ := unstructured.NestedInt64(u.Object, "spec", "triggers", "beforeInstall", "timeout")
			after, _, _ := unstructured.NestedInt64(u.Object, "spec", "triggers", "afterInstall", "timeout")
			if before != 5 || after != 15 {
				t.Errorf("%s: trigger timeouts %d, %d; want 5, 15", path.Base(f), before, after)
			}
		}
	}
	if rules < 6 {
		t.Errorf("applied %d example rules, want at least 6", rules)
	}
}

// TestMalformedRulesRejected checks that the API server rejects broken rules with a message that
// points at the problem.
func TestMalformedRulesRejected(t *testing.T) {
	e := newEnv(t)
	const enf = `[{"name": "a", "repo": "https://example/r"}]`
	tests := []struct{ name, spec, want string }{
		{"missing enforcements", `{"source": {"rancher": {}}}`, "spec.enforcements: Required value"},
		{"missing source", `{"enforcements": ` + enf + `}`, "spec.source: Required value"},
		{"empty enforcements", `{"enforcements": [], "source": {"rancher": {}}}`, "spec.enforcements: Invalid value"},
		{"enforcement without name", `{"enforcements": [{"repo": "r"}], "source": {"rancher": {}}}`, "spec.enforcements[0].name: Required value"},
		{"enforcement without repo", `{"enforcements": [{"name": "a"}], "source": {"rancher": {}}}`, "spec.enforcements[0].repo: Required value"},
		{"two sources", `{"enforcements": ` + enf + `, "source": {"rancher": {}, "eks": {}}}`, "exactly one source kind"},
		{"no source kind", `{"enforcements": ` + enf + `, "source": {}}`, "exactly one source kind"},
		{"enforcements not a list", `{"enforcements": "guestbook", "source": {"rancher": {}}}`, `spec.enforcements: Invalid value: "string"`},
		{"timeout not a number", `{"enforcements": ` + enf + `, "source": {"rancher": {}}, "triggers": {"beforeInstall": {"endpoint": "http://x", "timeout": "five"}}}`, "spec.triggers.beforeInstall.timeout: Invalid value"},
		{"labels not strings", `{"enforcements": ` + enf + `, "source": {"rancher": {"labels": {"a": 1}}}}`, "spec.source.rancher.labels.a: Invalid value"},
		{"unknown deletion policy", `{"enforcements": ` + enf + `, "source": {"rancher": {}}, "deletionPolicy": "Keep"}`, "spec.deletionPolicy: Unsupported value"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var u unstructured.Unstructured
			doc := `{"apiVersion": "enforcement.globo.com/v1beta1", "kind": "ClusterRule", "metadata": {"name": "bad-` +
				string(rune('a'+i)) + `", "namespace": "` + e.ns + `"}, "spec": ` + tt.spec + `}`
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatal(err)
			}
			err := e.c.Create(context.Background(), &u)
			if err == nil {
				t.Fatal("created; want a validation error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}
