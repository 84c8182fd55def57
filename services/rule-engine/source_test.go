package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

func TestSelection(t *testing.T) {
	base := v1beta1.Source{Rancher: &v1beta1.RancherSource{
		Filters: map[string]string{"driver": "googleKubernetesEngine"},
		Labels:  map[string]string{"cattle.io/creator": "norman"},
		Ignore:  []string{"cluster1"},
	}}
	sel, err := compileSelection(base, "enforcement")
	if err != nil {
		t.Fatal(err)
	}
	if sel.source.SecretName != "rancher" || sel.source.SecretNamespace != "enforcement" {
		t.Errorf("default secret: %+v", sel.source)
	}
	withExpr := base
	withExpr.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"prod", "stage"}}}
	withExpr.MatchLabels = map[string]string{"tier": "1"}
	exprSel, err := compileSelection(withExpr, "enforcement")
	if err != nil {
		t.Fatal(err)
	}
	mk := func(name string, labels map[string]string) *clusterForTest {
		c := cluster(name, labels)
		c.Source = sel.source
		return &clusterForTest{c}
	}
	norman := map[string]string{"cattle.io/creator": "norman", "env": "prod", "tier": "1"}
	tests := []struct {
		name string
		sel  *selection
		c    *clusterForTest
		want bool
	}{
		{"labels subset", sel, mk("a", norman), true},
		{"label value differs", sel, mk("a", map[string]string{"cattle.io/creator": "admin"}), false},
		{"label missing", sel, mk("a", nil), false},
		{"ignored name", sel, mk("cluster1", norman), false},
		{"other source", sel, &clusterForTest{cluster("a", norman)}, false},
		{"expressions match", exprSel, mk("a", norman), true},
		{"expression value not in set", exprSel, mk("a", map[string]string{"cattle.io/creator": "norman", "env": "dev", "tier": "1"}), false},
		{"matchLabels missing", exprSel, mk("a", map[string]string{"cattle.io/creator": "norman", "env": "prod"}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.sel.selects(&tt.c.Cluster); got != tt.want {
				t.Errorf("selects = %v, want %v", got, tt.want)
			}
		})
	}
	bad := base
	bad.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Near"}}
	if _, err := compileSelection(bad, "enforcement"); err == nil {
		t.Error("bad operator accepted")
	}
	if _, err := compileSelection(v1beta1.Source{}, "enforcement"); err == nil {
		t.Error("no source kind accepted")
	}
}

// TestSelectionSourceIsTheRuleSource: for one rule per source kind, with the filters,
// ConfigMap, regions, projects and secretName that make up a source's identity, the source
// compileSelection selects is the one Source.Ref derives. source-scanner's
// TestPublishedSourceIsTheRuleSource runs the real scanner for the same rules and checks that it
// publishes their clusters under that source, so the rule selects what the scanner announced.
func TestSelectionSourceIsTheRuleSource(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "pkg", "api", "v1beta1", "testdata", "source-identity-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	kinds := map[string]bool{}
	for {
		var rule v1beta1.ClusterRule
		if err := dec.Decode(&rule); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		want, err := rule.Spec.Source.Ref("enforcement")
		if err != nil {
			t.Fatalf("%s: %v", rule.Name, err)
		}
		sel, err := compileSelection(rule.Spec.Source, "enforcement")
		if err != nil {
			t.Fatalf("%s: %v", rule.Name, err)
		}
		if sel.source != want {
			t.Errorf("%s: selection source %+v, want %+v (Source.Ref)", rule.Name, sel.source, want)
		}
		kinds[want.Kind] = true
	}
	for _, k := range events.SourceKinds {
		if !kinds[k] {
			t.Errorf("no rule of source kind %s", k)
		}
	}
}

func TestOCMClaims(t *testing.T) {
	sel, err := compileSelection(v1beta1.Source{OCM: &v1beta1.OCMSource{Claims: map[string]string{"compliance": "compliant"}}}, "enforcement")
	if err != nil {
		t.Fatal(err)
	}
	c := cluster("hub-1", map[string]string{"compliance": "compliant"})
	c.Source = sel.source
	c.Attributes = map[string]any{"clusterClaims": map[string]any{"compliance": "noncompliant"}}
	if sel.selects(&c) {
		t.Error("claim attribute says noncompliant, but a label said compliant: selected")
	}
	c.Attributes = map[string]any{"clusterClaims": map[string]any{"compliance": "compliant"}}
	if !sel.selects(&c) {
		t.Error("compliant claim not selected")
	}
	c.Attributes = nil
	if !sel.selects(&c) {
		t.Error("without the attribute the merged label should decide")
	}
}

// An invalid gcloud filter expression is the rule's InvalidSpec with gcloud-style position
// marking, not a source that silently lists nothing.
func TestGKEFilterExpressionInvalid(t *testing.T) {
	for expr, want := range map[string]string{
		"status=RUNNING AND name:a OR name:b": "AND and OR combined without parentheses",
		"name.scope(zone):x":                  `transform or function "name.scope" is not supported`,
		"resourceLabels.env":                  "operator expected",
	} {
		_, err := compileSelection(v1beta1.Source{GKE: &v1beta1.GKESource{Projects: []string{"p"}, Filter: expr}}, "enforcement")
		if err == nil || !strings.Contains(err.Error(), "source.gke.filter") || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "*HERE*") {
			t.Errorf("%q: error %v, want source.gke.filter with %q", expr, err, want)
		}
	}
	sel, err := compileSelection(v1beta1.Source{GKE: &v1beta1.GKESource{Projects: []string{"p"}, Filter: "(status=RUNNING OR status=RECONCILING) resourceLabels.env:prod"}}, "enforcement")
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := compileSelection(v1beta1.Source{GKE: &v1beta1.GKESource{Projects: []string{"p"}}}, "enforcement")
	if sel.source.ID == plain.source.ID {
		t.Error("the filter expression narrows the listing but is not part of the source id")
	}
}

// A clusterProfile source selects by the source's label selector and by status.properties.
func TestClusterProfileSelection(t *testing.T) {
	sel, err := compileSelection(v1beta1.Source{ClusterProfile: &v1beta1.ClusterProfileSource{
		Namespaces: []string{"fleet"},
		Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "x-k8s.io/cluster-manager", Operator: metav1.LabelSelectorOpIn, Values: []string{"fleet", "ocm"}}}},
		Properties: map[string]string{"location": "eu-west"},
		Ignore:     []string{"skipped"},
	}}, "enforcement")
	if err != nil {
		t.Fatal(err)
	}
	if sel.source.Kind != events.SourceKindClusterProfile {
		t.Fatalf("source %+v", sel.source)
	}
	mk := func(name, manager, location string) *events.Cluster {
		c := cluster(name, map[string]string{"x-k8s.io/cluster-manager": manager})
		c.Source = sel.source
		c.Attributes = map[string]any{"properties": map[string]any{"location": location}}
		return &c
	}
	for _, tc := range []struct {
		c    *events.Cluster
		want bool
	}{
		{mk("a", "fleet", "eu-west"), true},
		{mk("b", "karmada", "eu-west"), false},
		{mk("c", "ocm", "us-east"), false},
		{mk("skipped", "fleet", "eu-west"), false},
	} {
		if got := sel.selects(tc.c); got != tc.want {
			t.Errorf("%s: selects = %v, want %v", tc.c.Name, got, tc.want)
		}
	}
	_, err = compileSelection(v1beta1.Source{ClusterProfile: &v1beta1.ClusterProfileSource{Selector: &metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Near"}}}}}, "enforcement")
	if err == nil || !strings.Contains(err.Error(), "source.clusterProfile.selector") {
		t.Errorf("invalid selector: %v", err)
	}
}
