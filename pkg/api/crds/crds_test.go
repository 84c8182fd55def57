package crds

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// chartDir is where hack/generate.sh has controller-gen write the CRDs; this package holds a copy.
var chartDir = filepath.Join("..", "..", "..", "deploy", "k8s", "enforcement-crds", "crds")

// TestCopyEqualsChart keeps the embedded copy byte for byte equal to the chart's files, file for
// file: run hack/generate.sh after changing the API types.
func TestCopyEqualsChart(t *testing.T) {
	chart, err := filepath.Glob(filepath.Join(chartDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	embedded, err := Files.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var names, chartNames []string
	for _, e := range embedded {
		names = append(names, e.Name())
	}
	for _, p := range chart {
		chartNames = append(chartNames, filepath.Base(p))
	}
	if !slices.Equal(names, chartNames) {
		t.Fatalf("embedded files %v, chart files %v: run hack/generate.sh", names, chartNames)
	}
	for _, name := range names {
		want, err := os.ReadFile(filepath.Join(chartDir, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := Files.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the chart's: run hack/generate.sh", name)
		}
	}
}

// TestAll parses every embedded CRD, and each call returns a copy of its own.
func TestAll(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, crd := range all {
		names = append(names, crd.Name)
	}
	if want := []string{"clusterrules.enforcement.globo.com", "clusterrulegrants.enforcement.globo.com"}; !slices.Equal(names, want) {
		t.Fatalf("CRDs %v, want %v", names, want)
	}
	all[0].Spec.Names.Kind = "Changed"
	again, err := ClusterRule()
	if err != nil {
		t.Fatal(err)
	}
	if again.Spec.Names.Kind != "ClusterRule" || len(again.Spec.Versions) != 1 || again.Spec.Versions[0].Schema == nil {
		t.Errorf("ClusterRule CRD: kind %q, versions %+v", again.Spec.Names.Kind, again.Spec.Versions)
	}
	if grant, err := ClusterRuleGrant(); err != nil || grant.Spec.Names.Kind != "ClusterRuleGrant" {
		t.Errorf("ClusterRuleGrant CRD: %v %v", grant, err)
	}
}
