package k8s

// Helpers that drive Helm as a library: load, lint and render a chart into objects.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// serviceCharts are the charts of the five services; enforcementCRDs holds only the CRD.
var serviceCharts = []string{"source-scanner", "rule-engine", "argo-syncer", "trigger-dispatcher", "policy-watcher"}

const enforcementCRDs = "enforcement-crds"

// release names a release: its name and namespace.
type release struct{ name, namespace string }

// loadChart loads the chart in the directory of that name next to this file.
func loadChart(t testing.TB, name string) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(name)
	if err != nil {
		t.Fatalf("load chart %s: %v", name, err)
	}
	return ch
}

// render renders the chart as `helm install` would (IsInstall, revision 1, Helm's default
// capabilities) with vals over the chart's values.yaml, and decodes every template's output
// into objects, in template name order. NOTES.txt is not an object and is left out; so are the
// CRDs in crds/, which Helm applies before the templates (see crdObjects).
func render(ch *chart.Chart, rel release, vals map[string]any) ([]*unstructured.Unstructured, error) {
	top, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{
		Name: rel.name, Namespace: rel.namespace, IsInstall: true, Revision: 1,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	out, err := engine.Render(ch, top)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(out))
	for name := range out {
		names = append(names, name)
	}
	sort.Strings(names)
	var objs []*unstructured.Unstructured
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		docs, err := decodeObjects([]byte(out[name]))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		objs = append(objs, docs...)
	}
	return objs, nil
}

// mustRender is render that fails the test on error.
func mustRender(t testing.TB, chartName string, rel release, vals map[string]any) []*unstructured.Unstructured {
	t.Helper()
	objs, err := render(loadChart(t, chartName), rel, vals)
	if err != nil {
		t.Fatalf("render %s: %v", chartName, err)
	}
	return objs
}

// crdObjects decodes the chart's crds/ files, which Helm installs as they are.
func crdObjects(t testing.TB, ch *chart.Chart) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, crd := range ch.CRDObjects() {
		docs, err := decodeObjects(crd.File.Data)
		if err != nil {
			t.Fatalf("%s: %v", crd.Filename, err)
		}
		objs = append(objs, docs...)
	}
	return objs
}

// decodeObjects splits a multi-document YAML stream and decodes each non-empty document. A
// document without apiVersion or kind is an error: Helm would refuse it at install.
func decodeObjects(data []byte) ([]*unstructured.Unstructured, error) {
	reader := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("decode %q: %w", doc, err)
		}
		if len(m) == 0 {
			continue // empty document (a template whose condition is false)
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetAPIVersion() == "" || u.GetKind() == "" {
			return nil, fmt.Errorf("document without apiVersion or kind: %q", doc)
		}
		objs = append(objs, u)
	}
}

// lintChart runs Helm's linter (`helm lint` with --namespace and --set vals) and returns its
// messages of at least warning severity: Helm's own info messages (such as "icon is
// recommended") are not defects.
func lintChart(dir string, namespace string, vals map[string]any) []support.Message {
	linter := lint.All(filepath.Clean(dir), vals, namespace, false)
	var out []support.Message
	for _, m := range linter.Messages {
		if m.Severity >= support.WarningSev {
			out = append(out, m)
		}
	}
	return out
}

// find returns the objects of that kind, optionally of that name ("" for any).
func find(objs []*unstructured.Unstructured, kind, name string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			out = append(out, o)
		}
	}
	return out
}

// one returns the only object of that kind and fails the test if there is not exactly one.
func one(t testing.TB, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	found := find(objs, kind, "")
	if len(found) != 1 {
		t.Fatalf("want one %s, got %d", kind, len(found))
	}
	return found[0]
}
