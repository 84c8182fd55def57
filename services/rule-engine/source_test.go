package main

import (
	"testing"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSourceID(t *testing.T) {
	a := SourceID("rancher", "enforcement", "rancher", map[string]string{"driver": "gke", "a": "b"})
	if len(a) != 16 {
		t.Fatalf("len = %d", len(a))
	}
	// The algorithm source-scanner shares: pinned so that a change is noticed.
	if want := "6c9f0570fcd96339"; a != want {
		t.Errorf("SourceID = %s, want %s (sha256 of kind\\0ns\\0secret\\0a=b\\0driver=gke\\0)", a, want)
	}
	if a != SourceID("rancher", "enforcement", "rancher", map[string]string{"a": "b", "driver": "gke"}) {
		t.Error("filter order changes the id")
	}
	for _, other := range []string{
		SourceID("rancher", "enforcement", "rancher", nil),
		SourceID("rancher", "enforcement", "rancher-secret", map[string]string{"driver": "gke", "a": "b"}),
		SourceID("gke", "enforcement", "rancher", map[string]string{"driver": "gke", "a": "b"}),
		SourceID("rancher", "other", "rancher", map[string]string{"driver": "gke", "a": "b"}),
	} {
		if other == a {
			t.Errorf("different source, same id %s", a)
		}
	}
}

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

// TestSourceIdentityPerKind pins which part of each source kind is its identity, as
// source-scanner derives it (sourceOf, eks.SourceFilters, gke.SourceFilters).
func TestSourceIdentityPerKind(t *testing.T) {
	id := func(kind, secret string, filters map[string]string) string {
		return SourceID(kind, "enforcement", secret, filters)
	}
	tests := []struct {
		name string
		src  v1beta1.Source
		want string
	}{
		{"rancher filters", v1beta1.Source{Rancher: &v1beta1.RancherSource{Filters: map[string]string{"driver": "gke"}}},
			id("rancher", "rancher", map[string]string{"driver": "gke"})},
		{"secretName", v1beta1.Source{SecretName: "rancher-secret", Rancher: &v1beta1.RancherSource{}}, id("rancher", "rancher-secret", nil)},
		{"static default ConfigMap", v1beta1.Source{Static: &v1beta1.StaticSource{ConfigMap: "enforcement-static-clusters"}}, id("static", "static", nil)},
		{"static other ConfigMap", v1beta1.Source{Static: &v1beta1.StaticSource{ConfigMap: "lab"}}, id("static", "static", map[string]string{"configMap": "lab"})},
		{"eks regions sorted", v1beta1.Source{EKS: &v1beta1.EKSSource{Regions: []string{"us-east-1", " eu-west-1", "us-east-1"}}},
			id("eks", "eks", map[string]string{"regions": "eu-west-1,us-east-1"})},
		{"eks no regions", v1beta1.Source{EKS: &v1beta1.EKSSource{}}, id("eks", "eks", nil)},
		{"gke projects and filters", v1beta1.Source{GKE: &v1beta1.GKESource{Projects: []string{"b", "a"}, Filters: map[string]string{"location": "europe-*"}}},
			id("gke", "gke", map[string]string{"location": "europe-*", "projects": "a,b"})},
		{"ocm", v1beta1.Source{OCM: &v1beta1.OCMSource{Claims: map[string]string{"x": "y"}}}, id("ocm", "ocm", nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := compileSelection(tt.src, "enforcement")
			if err != nil {
				t.Fatal(err)
			}
			if sel.source.ID != tt.want {
				t.Errorf("id %s, want %s", sel.source.ID, tt.want)
			}
		})
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
