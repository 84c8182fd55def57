package testenv_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// StartKube serves the WithCRDs resources, writes a kubeconfig another client can use, and
// stops the server when the test ends.
func TestStartKube(t *testing.T) {
	ctx := context.Background()
	var cfgFromFile client.Client
	t.Run("running", func(t *testing.T) {
		kube := testenv.StartKube(t, testenv.WithCRDs(testenv.OCMCRDs()...))
		ns := kube.Namespace(t, "start-kube")
		if kube.Namespace(t, ns) != ns {
			t.Fatal("Namespace does not return its name")
		}

		cfg, err := clientcmd.BuildConfigFromFlags("", kube.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		cfgFromFile, err = client.New(cfg, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var got corev1.Namespace
		if err := cfgFromFile.Get(ctx, types.NamespacedName{Name: ns}, &got); err != nil {
			t.Fatalf("get namespace through the kubeconfig: %v", err)
		}
		claims := &unstructured.UnstructuredList{}
		claims.SetGroupVersionKind(schema.GroupVersionKind{Group: "cluster.open-cluster-management.io", Version: "v1alpha1", Kind: "ClusterClaimList"})
		if err := kube.Client.List(ctx, claims); err != nil {
			t.Fatalf("WithCRDs: list ClusterClaims: %v", err)
		}
	})
	if err := cfgFromFile.List(ctx, &corev1.NamespaceList{}); err == nil {
		t.Fatal("API server still answers after its test ended")
	}
}

// InstallCRDsFromDir installs the CRDs of a directory, here a minimal one written by the test.
func TestInstallCRDsFromDir(t *testing.T) {
	kube := testenv.SharedKube(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "widgets.yaml"), `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer}
`)
	writeFile(t, filepath.Join(dir, "README.md"), "not a manifest")
	kube.InstallCRDsFromDir(t, dir)

	ns := kube.Namespace(t, "install-from-dir")
	mustCreate(t, kube, obj("example.com/v1", "Widget", ns, "w", map[string]any{"size": int64(3)}))
	mustReject(t, kube, obj("example.com/v1", "Widget", ns, "bad", map[string]any{"size": "big"}), "spec.size")
}

// The real Argo CD schemas are enforced: valid objects are accepted, invalid ones rejected with
// the offending field named.
func TestArgoCDCRDsValidate(t *testing.T) {
	kube := testenv.SharedKube(t)
	kube.InstallCRDs(t, testenv.ArgoCDCRDs()...)
	ns := kube.Namespace(t, "argocd")

	source := map[string]any{"repoURL": "https://example.com/baseline.git", "path": "base", "targetRevision": "HEAD"}
	destination := map[string]any{"name": "prod-eu", "namespace": "default"}

	mustCreate(t, kube, obj("argoproj.io/v1alpha1", "AppProject", ns, "prod-eu", map[string]any{
		"sourceRepos":  []any{"*"},
		"destinations": []any{map[string]any{"name": "prod-eu", "namespace": "*"}},
	}))
	mustCreate(t, kube, obj("argoproj.io/v1alpha1", "Application", ns, "prod-eu-baseline", map[string]any{
		"project": "prod-eu", "source": source, "destination": destination,
	}))
	mustReject(t, kube, obj("argoproj.io/v1alpha1", "Application", ns, "no-destination", map[string]any{
		"project": "prod-eu", "source": source,
	}), "spec.destination")
	mustReject(t, kube, obj("argoproj.io/v1alpha1", "Application", ns, "bad-destination", map[string]any{
		"project": "prod-eu", "source": source, "destination": map[string]any{"server": int64(443)},
	}), "spec.destination.server")

	mustCreate(t, kube, obj("argoproj.io/v1alpha1", "ApplicationSet", ns, "baseline", map[string]any{
		"generators": []any{map[string]any{"clusters": map[string]any{}}},
		"template": map[string]any{
			"metadata": map[string]any{"name": "{{name}}-baseline"},
			"spec":     map[string]any{"project": "{{name}}", "source": source, "destination": map[string]any{"name": "{{name}}"}},
		},
	}))
	mustReject(t, kube, obj("argoproj.io/v1alpha1", "ApplicationSet", ns, "no-template", map[string]any{
		"generators": []any{},
	}), "spec.template")
}

// The real OCM schemas are enforced for Policy, and ClusterClaim and ManagedCluster can be
// created and read back.
func TestOCMCRDsValidate(t *testing.T) {
	ctx := context.Background()
	kube := testenv.SharedKube(t)
	kube.InstallCRDs(t, testenv.OCMCRDs()...)
	ns := kube.Namespace(t, "ocm-policies")

	templates := []any{map[string]any{"objectDefinition": map[string]any{
		"apiVersion": "policy.open-cluster-management.io/v1",
		"kind":       "ConfigurationPolicy",
		"metadata":   map[string]any{"name": "baseline"},
	}}}
	mustCreate(t, kube, obj("policy.open-cluster-management.io/v1", "Policy", ns, "baseline", map[string]any{
		"disabled": false, "remediationAction": "inform", "policy-templates": templates,
	}))
	mustReject(t, kube, obj("policy.open-cluster-management.io/v1", "Policy", ns, "disabled-string", map[string]any{
		"disabled": "no", "policy-templates": templates,
	}), "spec.disabled")
	mustReject(t, kube, obj("policy.open-cluster-management.io/v1", "Policy", ns, "no-disabled", map[string]any{
		"policy-templates": templates,
	}), "spec.disabled")
	mustReject(t, kube, obj("policy.open-cluster-management.io/v1", "Policy", ns, "bad-remediation", map[string]any{
		"disabled": false, "remediationAction": "fix", "policy-templates": templates,
	}), "spec.remediationAction")

	mustCreate(t, kube, obj("cluster.open-cluster-management.io/v1alpha1", "ClusterClaim", "", "compliance.enforcement.io", map[string]any{
		"value": "compliant",
	}))
	mustCreate(t, kube, obj("cluster.open-cluster-management.io/v1", "ManagedCluster", "", "prod-eu", map[string]any{
		"hubAcceptsClient": true,
	}))
	claim := obj("cluster.open-cluster-management.io/v1alpha1", "ClusterClaim", "", "", nil)
	if err := kube.Client.Get(ctx, types.NamespacedName{Name: "compliance.enforcement.io"}, claim); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := unstructured.NestedString(claim.Object, "spec", "value"); v != "compliant" {
		t.Fatalf("ClusterClaim spec.value = %q, want compliant", v)
	}
}

// obj builds an unstructured object; namespace "" means cluster-scoped.
func obj(apiVersion, kind, namespace, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind}}
	u.SetNamespace(namespace)
	u.SetName(name)
	if spec != nil {
		u.Object["spec"] = spec
	}
	return u
}

func mustCreate(t *testing.T, kube *testenv.Kube, u *unstructured.Unstructured) {
	t.Helper()
	if err := kube.Client.Create(context.Background(), u); err != nil {
		t.Fatalf("create %s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

// mustReject asserts that the API server refuses u as invalid, naming field.
func mustReject(t *testing.T, kube *testenv.Kube, u *unstructured.Unstructured, field string) {
	t.Helper()
	err := kube.Client.Create(context.Background(), u)
	if !apierrors.IsInvalid(err) {
		t.Fatalf("create %s %s: got %v, want Invalid", u.GetKind(), u.GetName(), err)
	}
	if !strings.Contains(err.Error(), field) {
		t.Fatalf("create %s %s: error %q does not name %s", u.GetKind(), u.GetName(), err, field)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
