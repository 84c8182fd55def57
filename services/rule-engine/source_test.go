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
