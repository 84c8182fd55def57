package compat_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/pkg/testenv/compat"
)

func TestMain(m *testing.M) { os.Exit(testenv.RunWithSharedKube(m)) }

// TestManifestsApplyUnchanged creates every object of the suite, unchanged, on a real API server
// with the repository's ClusterRule CRD and the OCM CRDs, and checks that the stored object still
// holds every field and value of the manifest: the schema neither rejects nor prunes anything the
// original accepted (defaults may add fields). Objects without a namespace go into one namespace
// per file, since the upstream examples reuse names.
func TestManifestsApplyUnchanged(t *testing.T) {
	kube := testenv.SharedKube(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kube.InstallCRDsFromDir(t, filepath.Join(root, "deploy", "k8s", "enforcement-crds", "crds"))
	kube.InstallCRDs(t, testenv.OCMCRDs()...)
	ctx := context.Background()
	for i, name := range compat.Files() {
		t.Run(name, func(t *testing.T) {
			ns := kube.Namespace(t, fmt.Sprintf("compat-%d", i))
			for _, obj := range compat.Objects(t, name) {
				want := normalise(t, obj.Object)
				namespaced, err := kube.Client.IsObjectNamespaced(obj)
				if err != nil {
					t.Fatalf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
				}
				if namespaced && obj.GetNamespace() == "" {
					obj.SetNamespace(ns)
					unstructured.RemoveNestedField(want, "metadata", "namespace")
				} else if namespaced {
					kube.Namespace(t, obj.GetNamespace())
				}
				if err := kube.Client.Create(ctx, obj); err != nil {
					t.Fatalf("create %s %s: %v", obj.GetKind(), obj.GetName(), err)
				}
				stored := &unstructured.Unstructured{}
				stored.SetGroupVersionKind(obj.GroupVersionKind())
				if err := kube.Client.Get(ctx, client.ObjectKeyFromObject(obj), stored); err != nil {
					t.Fatalf("get %s %s: %v", obj.GetKind(), obj.GetName(), err)
				}
				got := normalise(t, stored.Object)
				if obj.GetKind() == "Secret" {
					// The API server stores stringData as base64 data.
					sd, _, _ := unstructured.NestedStringMap(want, "stringData")
					for k, v := range sd {
						enc, _, _ := unstructured.NestedString(got, "data", k)
						if dec, err := base64.StdEncoding.DecodeString(enc); err != nil || string(dec) != v {
							t.Errorf("Secret %s: stringData.%s = %q, stored data.%s = %q", obj.GetName(), k, v, k, enc)
						}
					}
					unstructured.RemoveNestedField(want, "stringData")
				}
				for _, d := range missing(want, got, obj.GetKind()) {
					t.Errorf("not stored as written: %s", d)
				}
			}
		})
	}
}

// normalise returns obj as JSON decodes it, so numbers compare alike whatever decoded them.
func normalise(t *testing.T, obj map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// missing lists the paths where got lacks a field of want or holds another value. Maps may have
// extra keys in got; lists must match element by element.
func missing(want, got any, path string) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want an object, stored %v", path, got)}
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var out []string
		for _, k := range keys {
			out = append(out, missing(w[k], g[k], path+"."+k)...)
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: want %v, stored %v", path, w, got)}
		}
		var out []string
		for i := range w {
			out = append(out, missing(w[i], g[i], fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	default:
		if !reflect.DeepEqual(want, got) {
			return []string{fmt.Sprintf("%s: want %v, stored %v", path, want, got)}
		}
		return nil
	}
}

// TestMissingFindsDrops checks that the comparison of TestManifestsApplyUnchanged can fail: a
// pruned field, a changed value and a shortened list are all reported.
func TestMissingFindsDrops(t *testing.T) {
	want := map[string]any{"spec": map[string]any{"a": "x", "b": 1.0, "l": []any{"p", "q"}}}
	got := map[string]any{"spec": map[string]any{"b": 2.0, "l": []any{"p"}, "extra": true}}
	d := missing(want, got, "X")
	if len(d) != 3 {
		t.Fatalf("missing reported %d differences, want 3: %v", len(d), d)
	}
	if d := missing(want, map[string]any{"spec": map[string]any{"a": "x", "b": 1.0, "l": []any{"p", "q"}, "n": 0.0}}, "X"); d != nil {
		t.Errorf("extra fields reported as differences: %v", d)
	}
}
