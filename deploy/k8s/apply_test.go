package k8s

// Server-side dry runs of the rendered charts against the real kube-apiserver.

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// restrictedLabel makes the API server's PodSecurity admission enforce the restricted profile
// in a namespace.
var restrictedLabel = map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}

// kubeWithCRDs returns the shared API server with every CRD the charts' objects refer to: the
// ClusterRule CRD (from the enforcement-crds chart, the way Helm installs it), Argo CD's and
// OCM's, and the ServiceMonitor subset in testdata.
func kubeWithCRDs(t *testing.T) *testenv.Kube {
	t.Helper()
	kube := testenv.SharedKube(t)
	kube.InstallCRDsFromDir(t, filepath.Join(enforcementCRDs, "crds"))
	kube.InstallCRDs(t, append(testenv.ArgoCDCRDs(), testenv.OCMCRDs()...)...)
	kube.InstallCRDsFromDir(t, "testdata")
	return kube
}

// restrictedNamespace creates the namespace (if missing) with PodSecurity enforcing the
// restricted profile.
func restrictedNamespace(t *testing.T, c client.Client, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: restrictedLabel}}
	if err := c.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// dryRun creates obj with a server-side dry run and strict field validation: the API server
// decodes, defaults, validates (schemas of built-in types and CRDs, unknown fields) and admits
// it, and stores nothing.
func dryRun(ctx context.Context, c client.Client, obj *unstructured.Unstructured) error {
	return c.Create(ctx, obj.DeepCopy(), client.DryRunAll, client.FieldValidation(metav1.FieldValidationStrict))
}

func TestServerSideDryRun(t *testing.T) {
	kube := kubeWithCRDs(t)
	ctx := context.Background()
	// Every namespace the default and custom values refer to.
	for _, ns := range []string{"enforcement", "argocd", "enf-system", "gitops", "team-a", "team-b", "cluster1", "enf-leases"} {
		restrictedNamespace(t, kube.Client, ns)
	}
	t.Run(enforcementCRDs, func(t *testing.T) {
		// The CRD as Helm installs it from crds/; InstallCRDsFromDir created it for real
		// already, so the dry run meets an existing object.
		crds := crdObjects(t, loadChart(t, enforcementCRDs))
		var names []string
		for _, crd := range crds {
			names = append(names, crd.GetName())
		}
		slices.Sort(names)
		if want := []string{"clusterrulegrants.enforcement.globo.com", "clusterrules.enforcement.globo.com"}; !slices.Equal(names, want) {
			t.Fatalf("crds/ holds %v, want %v", names, want)
		}
		for _, crd := range crds {
			if err := dryRun(ctx, kube.Client, crd); !apierrors.IsAlreadyExists(err) {
				t.Fatalf("dry run of the installed CRD %s: %v, want AlreadyExists", crd.GetName(), err)
			}
		}
	})
	for _, name := range serviceCharts {
		for caseName, tc := range map[string]struct {
			rel  release
			vals map[string]any
		}{
			"defaults": {defaultRelease, nil},
			"custom":   {release{name: "custom", namespace: "enf-system"}, customValues(name)},
		} {
			t.Run(name+"/"+caseName, func(t *testing.T) {
				objs := mustRender(t, name, tc.rel, tc.vals)
				for _, obj := range objs {
					if err := dryRun(ctx, kube.Client, obj); err != nil {
						t.Errorf("%s %s/%s: %v", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
					}
				}
				// PodSecurity admission checks pods, not Deployments: dry-run the pod the
				// Deployment would create, in a namespace enforcing "restricted".
				if err := dryRun(ctx, kube.Client, podOf(t, objs)); err != nil {
					t.Errorf("pod of the Deployment: %v", err)
				}
			})
		}
	}
}

// TestDryRunRejects shows the dry run is a real check: the API server refuses a misspelt field
// (strict validation), an invalid ServiceMonitor interval (CRD schema) and a pod that drops the
// restricted security context (PodSecurity admission).
func TestDryRunRejects(t *testing.T) {
	kube := kubeWithCRDs(t)
	ctx := context.Background()
	restrictedNamespace(t, kube.Client, "enforcement")
	objs := mustRender(t, "rule-engine", defaultRelease, map[string]any{"serviceMonitor": map[string]any{"enabled": true, "interval": "often"}})
	if err := dryRun(ctx, kube.Client, one(t, objs, "ServiceMonitor")); !apierrors.IsInvalid(err) {
		t.Errorf("ServiceMonitor with interval \"often\": %v, want Invalid", err)
	}
	dep := one(t, objs, "Deployment").DeepCopy()
	_ = unstructured.SetNestedField(dep.Object, int64(1), "spec", "replicaz")
	if err := dryRun(ctx, kube.Client, dep); err == nil || !strings.Contains(err.Error(), "replicaz") {
		t.Errorf("Deployment with an unknown field: %v, want a strict decoding error", err)
	}
	pod := podOf(t, objs)
	unstructured.RemoveNestedField(pod.Object, "spec", "securityContext")
	containers, _, _ := unstructured.NestedSlice(pod.Object, "spec", "containers")
	delete(containers[0].(map[string]any), "securityContext")
	_ = unstructured.SetNestedSlice(pod.Object, containers, "spec", "containers")
	if err := dryRun(ctx, kube.Client, pod); !apierrors.IsForbidden(err) {
		t.Errorf("pod without a security context in a restricted namespace: %v, want Forbidden", err)
	}
}

// podOf returns the pod the rendered Deployment's template describes.
func podOf(t *testing.T, objs []*unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	dep := deployment(t, objs)
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: dep.Name + "-pod", Namespace: dep.Namespace, Labels: dep.Spec.Template.Labels},
		Spec:       dep.Spec.Template.Spec,
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pod)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: u}
}
