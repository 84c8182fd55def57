package k8s

// argo-syncer's admission fence: the chart's ValidatingAdmissionPolicy, installed for real,
// judges writes made as the chart's ServiceAccount (impersonated) on the real API server.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// Namespaces of TestArgoSyncerAdmissionFence.
const (
	fenceNS     = "fence-enf"
	fenceArgoNS = "fence-argocd"
)

var (
	gvrSecret      = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	gvrApplication = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"}
	gvrAppProject  = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "appprojects"}
)

// TestArgoSyncerAdmissionFence: with the argo-syncer chart's RBAC and admission policy
// installed, its ServiceAccount is refused every write to argocd-secret (update, patch,
// delete) and the creation of an unlabelled Secret, though RBAC allows them; it may create,
// update and delete the objects it manages; and it may take over the original operator's
// Application and AppProject exactly as the adoption does (managed-by label and adoption record,
// nothing else), but not a foreign Application, nor an original one while changing its spec.
func TestArgoSyncerAdmissionFence(t *testing.T) {
	kube := kubeWithCRDs(t)
	ctx := context.Background()
	for _, ns := range []string{fenceNS, fenceArgoNS} {
		kube.Namespace(t, ns)
	}
	objs := mustRender(t, "argo-syncer", release{name: "fence", namespace: fenceNS},
		map[string]any{"config": map[string]any{"argocdNamespace": fenceArgoNS}})
	if len(find(objs, "ValidatingAdmissionPolicy", "")) != 1 || len(find(objs, "ValidatingAdmissionPolicyBinding", "")) != 1 {
		t.Fatal("the chart renders no admission policy and binding by default")
	}
	var user string
	for _, obj := range objs {
		if !rbacKinds[obj.GetKind()] {
			continue
		}
		if err := kube.Client.Create(ctx, obj); err != nil {
			t.Fatalf("create %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		if obj.GetKind() == "ServiceAccount" {
			user = "system:serviceaccount:" + obj.GetNamespace() + ":" + obj.GetName()
		}
	}
	admin, err := dynamic.NewForConfig(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(kube.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + fenceNS, "system:authenticated"}}
	syncer, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	as := func(c dynamic.Interface, gvr schema.GroupVersionResource) dynamic.ResourceInterface {
		return c.Resource(gvr).Namespace(fenceArgoNS)
	}
	create := func(c dynamic.Interface, gvr schema.GroupVersionResource, manifest string) (*unstructured.Unstructured, error) {
		u := &unstructured.Unstructured{}
		if err := json.Unmarshal([]byte(manifest), &u.Object); err != nil {
			t.Fatal(err)
		}
		return as(c, gvr).Create(ctx, u, metav1.CreateOptions{})
	}
	refused := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "argo-syncer may ") {
			t.Errorf("%s: %v, want the admission policy's refusal", what, err)
		}
	}
	allowed := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v, want it allowed", what, err)
		}
	}

	if _, err := create(admin, gvrSecret, `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"argocd-secret"},"stringData":{"admin.password":"x"}}`); err != nil {
		t.Fatal(err)
	}
	// The API server loads a new policy asynchronously: wait until it judges.
	testenv.Eventually(t, 30*time.Second, func() error {
		_, err := as(syncer, gvrSecret).Patch(ctx, "argocd-secret", types.MergePatchType, []byte(`{"stringData":{"admin.password":"owned"}}`), metav1.PatchOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "argo-syncer may update only secrets") {
			return errors.New(fmt.Sprint("patch argocd-secret: ", err))
		}
		return nil
	})

	// argocd-secret, and anything else unlabelled: refused, though RBAC allows it.
	sec, err := as(admin, gvrSecret).Get(ctx, "argocd-secret", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = as(syncer, gvrSecret).Update(ctx, sec, metav1.UpdateOptions{})
	refused("update argocd-secret", err)
	refused("delete argocd-secret", as(syncer, gvrSecret).Delete(ctx, "argocd-secret", metav1.DeleteOptions{}))
	_, err = create(syncer, gvrSecret, `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"repo-creds"},"stringData":{"url":"https://git.example"}}`)
	refused("create an unlabelled Secret", err)
	_, err = as(syncer, gvrSecret).Patch(ctx, "argocd-secret", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":"enforcement"}}}`), metav1.PatchOptions{})
	refused("label argocd-secret as managed", err)
	if got, err := as(admin, gvrSecret).Get(ctx, "argocd-secret", metav1.GetOptions{}); err != nil || len(got.GetLabels()) != 0 {
		t.Fatalf("argocd-secret after the attempts: %v %v", got, err)
	}

	// What it manages: created, updated, deleted.
	_, err = create(syncer, gvrSecret, `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"cluster-c1","labels":{"app.kubernetes.io/managed-by":"enforcement","argocd.argoproj.io/secret-type":"cluster"}},"stringData":{"name":"c1","server":"https://c1.example"}}`)
	allowed("create a managed cluster Secret", err)
	_, err = as(syncer, gvrSecret).Patch(ctx, "cluster-c1", types.MergePatchType, []byte(`{"stringData":{"server":"https://c1-new.example"}}`), metav1.PatchOptions{})
	allowed("update a managed cluster Secret", err)
	allowed("delete a managed cluster Secret", as(syncer, gvrSecret).Delete(ctx, "cluster-c1", metav1.DeleteOptions{}))
	_, err = create(syncer, gvrApplication, application("c9-agent", `{"app.kubernetes.io/managed-by":"enforcement","cluster_name":"c9"}`, "c9"))
	allowed("create a managed Application", err)

	// The documented adoption: the original operator's Application and AppProject.
	if _, err := create(admin, gvrApplication, application("c1-guestbook", `{"cluster_name":"c1"}`, "c1")); err != nil {
		t.Fatal(err)
	}
	if _, err := create(admin, gvrAppProject, `{"apiVersion":"argoproj.io/v1alpha1","kind":"AppProject","metadata":{"name":"c1"},
		"spec":{"sourceRepos":["*"],"destinations":[{"server":"https://c1.example","namespace":"*"}]}}`); err != nil {
		t.Fatal(err)
	}
	if _, err := create(admin, gvrApplication, application("c2-foreign", `{"cluster_name":"c2","team":"payments"}`, "c2")); err != nil {
		t.Fatal(err)
	}
	adopt := func(gvr schema.GroupVersionResource, name, extra string) error {
		patch := `{"metadata":{"labels":{"app.kubernetes.io/managed-by":"enforcement"},"annotations":{` +
			`"enforcement.globo.com/adopted-from":"globocom/enforcement","enforcement.globo.com/adopted-at":"2026-01-01T00:00:00Z"}}` + extra + `}`
		_, err := as(syncer, gvr).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
	refused("adopt the original's Application while changing its spec",
		adopt(gvrApplication, "c1-guestbook", `,"spec":{"source":{"path":"elsewhere"}}`))
	refused("adopt a foreign Application", adopt(gvrApplication, "c2-foreign", ""))
	allowed("adopt the original's Application", adopt(gvrApplication, "c1-guestbook", ""))
	allowed("adopt the original's AppProject", adopt(gvrAppProject, "c1", ""))
	_, err = as(syncer, gvrApplication).Patch(ctx, "c1-guestbook", types.MergePatchType, []byte(`{"spec":{"source":{"path":"rendered"}}}`), metav1.PatchOptions{})
	allowed("update the adopted Application", err)
	if got, err := as(admin, gvrApplication).Get(ctx, "c2-foreign", metav1.GetOptions{}); err != nil || got.GetLabels()["app.kubernetes.io/managed-by"] != "" {
		t.Errorf("foreign Application after the attempt: %v %v", got.GetLabels(), err)
	}
}

// application is an Application of the original operator's shape with the given labels (JSON).
func application(name, labels, cluster string) string {
	return `{"apiVersion":"argoproj.io/v1alpha1","kind":"Application","metadata":{"name":"` + name + `","labels":` + labels + `},
		"spec":{"project":"default","destination":{"name":"` + cluster + `","namespace":"default"},
		"source":{"repoURL":"https://github.com/argoproj/argocd-example-apps","path":"guestbook"},
		"syncPolicy":{"automated":{"prune":true,"selfHeal":true}}}}`
}
