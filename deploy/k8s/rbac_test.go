package k8s

// RBAC tests: the charts' ServiceAccounts, Roles and bindings are installed for real, and each
// service's permissions are asked of the API server's own authorizer while impersonating its
// ServiceAccount.

import (
	"context"
	"fmt"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Namespaces of the RBAC test: the releases live in rbacNS, the source Secrets in opsNS, Argo
// CD in argoNS; teamNS holds ClusterRules and a signing Secret, clusterNS a managed cluster's
// Policies.
const (
	rbacNS    = "rbac-enf"
	opsNS     = "rbac-ops"
	argoNS    = "rbac-argocd"
	teamNS    = "rbac-team"
	clusterNS = "rbac-cluster1"
)

// rbacValues configure each release of the test so that every namespace-scoped permission
// points somewhere other than the release namespace, which a grant there must not leak into.
var rbacValues = map[string]map[string]any{
	"source-scanner":     {"config": map[string]any{"operatorNamespace": opsNS}},
	"rule-engine":        nil,
	"argo-syncer":        {"config": map[string]any{"operatorNamespace": opsNS, "argocdNamespace": argoNS}},
	"trigger-dispatcher": {"rbac": map[string]any{"signingSecretNamespaces": []any{teamNS}}},
	"policy-watcher":     {"config": map[string]any{"watchNamespace": clusterNS}},
}

// access is one question to the authorizer: may the subject do verb on group/resource
// (/subresource) in namespace ("" for cluster-scoped or all namespaces)?
type access struct {
	verb, group, resource, subresource, namespace string
}

func (a access) String() string {
	r := a.resource
	if a.group != "" {
		r += "." + a.group
	}
	if a.subresource != "" {
		r += "/" + a.subresource
	}
	ns := a.namespace
	if ns == "" {
		ns = "*"
	}
	return fmt.Sprintf("%s %s in %s", a.verb, r, ns)
}

// verbs expands one resource into an access per verb.
func verbs(group, resource, sub, ns string, vs ...string) []access {
	out := make([]access, len(vs))
	for i, v := range vs {
		out[i] = access{v, group, resource, sub, ns}
	}
	return out
}

const (
	enfGroup    = "enforcement.globo.com"
	argoGroup   = "argoproj.io"
	ocmCluster  = "cluster.open-cluster-management.io"
	ocmPolicy   = "policy.open-cluster-management.io"
	eventsGroup = "events.k8s.io"
)

// rbacExpectations lists, per service, what it needs (allowed) and a selection of what it must
// not have (denied).
var rbacExpectations = map[string]struct{ allowed, denied [][]access }{
	"source-scanner": {
		allowed: [][]access{
			verbs(enfGroup, "clusterrules", "", "", "get", "list", "watch"), // all namespaces
			verbs(enfGroup, "clusterrules", "", teamNS, "get", "list", "watch"),
			verbs("", "secrets", "", opsNS, "get", "list", "watch"),
			verbs("", "configmaps", "", opsNS, "get", "list", "watch"),
			verbs("", "events", "", teamNS, "create", "patch"), // ReleaseIgnored on a tenant's rule
			verbs(eventsGroup, "events", "", teamNS, "create", "patch"),
		},
		denied: [][]access{
			verbs(enfGroup, "clusterrules", "", teamNS, "create", "update", "patch", "delete"),
			verbs("", "events", "", teamNS, "delete"),
			verbs(enfGroup, "clusterrules", "status", teamNS, "update", "patch"),
			verbs("", "secrets", "", "", "get", "list"), // cluster-wide
			verbs("", "secrets", "", rbacNS, "get", "list"),
			verbs("", "secrets", "", "kube-system", "get"),
			verbs("", "secrets", "", opsNS, "create", "update", "patch", "delete"),
			verbs("", "configmaps", "", opsNS, "create", "update", "delete"),
			verbs(ocmCluster, "managedclusters", "", "", "list"),              // off unless rbac.managedClusters
			verbs("multicluster.x-k8s.io", "clusterprofiles", "", "", "list"), // off unless rbac.clusterProfiles
			verbs(argoGroup, "applications", "", argoNS, "list"),
		},
	},
	"rule-engine": {
		allowed: [][]access{
			verbs(enfGroup, "clusterrules", "", "", "get", "list", "watch", "update", "patch"),
			verbs(enfGroup, "clusterrules", "", teamNS, "get", "list", "watch", "update", "patch"),
			verbs(enfGroup, "clusterrules", "status", teamNS, "update", "patch"),
			verbs(enfGroup, "clusterrules", "finalizers", teamNS, "update"),
			verbs(enfGroup, "clusterrulegrants", "", rbacNS, "get", "list", "watch"),
			verbs("", "events", "", teamNS, "create", "patch"),
			verbs(eventsGroup, "events", "", teamNS, "create", "patch"),
		},
		denied: [][]access{
			verbs(enfGroup, "clusterrules", "", teamNS, "create", "delete", "deletecollection"),
			verbs(enfGroup, "clusterrulegrants", "", rbacNS, "create", "update", "patch", "delete"),
			verbs(enfGroup, "clusterrulegrants", "", teamNS, "list"),
			verbs("", "secrets", "", opsNS, "get", "list"),
			verbs("", "secrets", "", rbacNS, "get"),
			verbs("", "configmaps", "", opsNS, "get"),
			verbs(argoGroup, "applications", "", argoNS, "list", "create"),
			verbs("", "events", "", teamNS, "delete"),
		},
	},
	"argo-syncer": {
		allowed: [][]access{
			verbs("", "secrets", "", argoNS, "get", "list", "watch", "create", "update", "patch", "delete"),
			verbs(argoGroup, "appprojects", "", argoNS, "get", "list", "watch", "create", "update", "patch", "delete"),
			verbs(argoGroup, "applications", "", argoNS, "get", "list", "watch", "create", "update", "patch", "delete"),
			verbs("", "secrets", "", opsNS, "get"),
		},
		denied: [][]access{
			verbs("", "secrets", "", opsNS, "list", "watch", "create", "update", "patch", "delete"),
			verbs("", "secrets", "", rbacNS, "get", "create", "delete"),
			verbs("", "secrets", "", "kube-system", "get", "create", "update", "delete"),
			verbs("", "secrets", "", "", "list", "create"), // cluster-wide
			verbs(argoGroup, "applications", "", "default", "create", "delete"),
			verbs(argoGroup, "appprojects", "", rbacNS, "create", "delete"),
			verbs(argoGroup, "applications", "", "", "list"),
			verbs("", "configmaps", "", argoNS, "get", "update"),
			verbs(enfGroup, "clusterrules", "", teamNS, "list"),
		},
	},
	"trigger-dispatcher": {
		allowed: [][]access{
			verbs("", "secrets", "", teamNS, "get"),
			// Webhook endpoints with credentials are read from their rule (events carry them redacted).
			verbs(enfGroup, "clusterrules", "", teamNS, "get"),
		},
		denied: [][]access{
			// argo-syncer owns the beforeInstall gate: the dispatcher reads no Application.
			verbs(argoGroup, "applications", "", argoNS, "get", "list", "watch", "create", "update", "patch", "delete"),
			verbs("", "secrets", "", teamNS, "list", "watch", "create", "update", "delete"),
			verbs("", "secrets", "", argoNS, "get", "list"), // Argo CD's cluster credentials
			verbs("", "secrets", "", opsNS, "get"),          // source credentials
			verbs("", "secrets", "", rbacNS, "get"),         // signing Secrets only where configured
			verbs(enfGroup, "clusterrules", "", teamNS, "list", "watch", "update"),
			verbs(enfGroup, "clusterrules", "", rbacNS, "get"), // rules only where configured
		},
	},
	"policy-watcher": {
		allowed: [][]access{
			verbs(ocmPolicy, "policies", "", clusterNS, "get", "list", "watch"),
			verbs(ocmCluster, "clusterclaims", "", "", "get", "list", "watch", "create", "update", "patch"),
			// It asks whether it may watch before it does (every account may, system:basic-user).
			verbs("authorization.k8s.io", "selfsubjectaccessreviews", "", "", "create"),
			// The original's ClusterRole (pkg/testenv/compat/policy-watcher/deployment.yaml):
			// policies get, list; clusterclaims get, patch, update. The chart grants a superset
			// (watch, create), with policies limited to WATCH_NAMESPACE.
			verbs(ocmPolicy, "policies", "", clusterNS, "get", "list"),
			verbs(ocmCluster, "clusterclaims", "", "", "get", "patch", "update"),
		},
		denied: [][]access{
			verbs("", "secrets", "", clusterNS, "get", "list"),
			verbs("", "secrets", "", rbacNS, "get", "list"),
			verbs("", "secrets", "", "", "list"),
			verbs(ocmPolicy, "policies", "", clusterNS, "create", "update", "patch", "delete"),
			verbs(ocmPolicy, "policies", "", rbacNS, "list"),
			verbs(ocmPolicy, "policies", "", "", "list"),
			verbs(ocmCluster, "clusterclaims", "", "", "delete", "deletecollection"),
			verbs(ocmCluster, "managedclusters", "", "", "get"),
			verbs(enfGroup, "clusterrules", "", teamNS, "list"),
		},
	},
}

// rbacKinds are the kinds installed for real: what a subject's permissions consist of,
// argo-syncer's admission fence included.
var rbacKinds = map[string]bool{"ServiceAccount": true, "Role": true, "RoleBinding": true, "ClusterRole": true, "ClusterRoleBinding": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true}

// installRBAC renders the chart for the RBAC test and creates its ServiceAccount, Roles,
// ClusterRoles and bindings (not dry run). It returns the ServiceAccount's user name.
func installRBAC(t *testing.T, c client.Client, name string) string {
	t.Helper()
	objs := mustRender(t, name, release{name: "rbac", namespace: rbacNS}, rbacValues[name])
	for _, obj := range objs {
		if !rbacKinds[obj.GetKind()] {
			continue
		}
		if err := c.Create(context.Background(), obj); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %s %s/%s: %v", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
		}
	}
	sa := one(t, objs, "ServiceAccount")
	return "system:serviceaccount:" + sa.GetNamespace() + ":" + sa.GetName()
}

// impersonate returns a clientset acting as the ServiceAccount user (with the groups the API
// server gives every ServiceAccount), through the test's system:masters credentials.
func impersonate(t *testing.T, cfg *rest.Config, user, namespace string) kubernetes.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: user,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// allowed asks the authorizer, as the impersonated subject, whether it may do a.
func allowed(t *testing.T, cs kubernetes.Interface, a access) bool {
	t.Helper()
	review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(), &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource, Namespace: a.namespace,
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectAccessReview %s: %v", a, err)
	}
	return review.Status.Allowed
}

func TestRBAC(t *testing.T) {
	kube := kubeWithCRDs(t)
	for _, ns := range []string{rbacNS, opsNS, argoNS, teamNS, clusterNS} {
		kube.Namespace(t, ns)
	}
	// Control: a ServiceAccount no chart binds may do none of it, so an "allowed" below comes
	// from the chart's RBAC and not from the impersonation.
	nobody := impersonate(t, kube.Config, "system:serviceaccount:"+rbacNS+":nobody", rbacNS)
	for _, a := range []access{
		{"list", enfGroup, "clusterrules", "", ""}, {"get", "", "secrets", "", opsNS},
		{"create", "", "secrets", "", argoNS}, {"patch", ocmCluster, "clusterclaims", "", ""},
	} {
		if allowed(t, nobody, a) {
			t.Fatalf("an unbound ServiceAccount may %s", a)
		}
	}
	for _, name := range serviceCharts {
		t.Run(name, func(t *testing.T) {
			user := installRBAC(t, kube.Client, name)
			cs := impersonate(t, kube.Config, user, rbacNS)
			want := rbacExpectations[name]
			for _, group := range want.allowed {
				for _, a := range group {
					if !allowed(t, cs, a) {
						t.Errorf("%s may not %s, which it needs", name, a)
					}
				}
			}
			for _, group := range want.denied {
				for _, a := range group {
					if allowed(t, cs, a) {
						t.Errorf("%s may %s, which it must not", name, a)
					}
				}
			}
			checkLeaseAccess(t, cs, name)
		})
	}
}

// leaseNamespaces is where each hub chart's Lease lives with rbacValues: OPERATOR_NAMESPACE,
// or the release namespace for trigger-dispatcher (which has no operator namespace value).
var leaseNamespaces = map[string]string{"source-scanner": opsNS, "rule-engine": rbacNS, "argo-syncer": opsNS, "trigger-dispatcher": rbacNS}

// checkLeaseAccess: a hub service may take and renew Leases in its Lease namespace only, and
// may not delete them; policy-watcher has no Lease access at all.
func checkLeaseAccess(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	ns, hub := leaseNamespaces[name]
	if hub {
		for _, a := range verbs(coordinationGroup, "leases", "", ns, "get", "create", "update") {
			if !allowed(t, cs, a) {
				t.Errorf("%s may not %s, which leader election needs", name, a)
			}
		}
	}
	denied := append(verbs(coordinationGroup, "leases", "", "kube-system", "get", "update"), verbs(coordinationGroup, "leases", "", teamNS, "create")...)
	if hub {
		denied = append(denied, verbs(coordinationGroup, "leases", "", ns, "delete")...)
	}
	for _, a := range denied {
		if allowed(t, cs, a) {
			t.Errorf("%s may %s, which it must not", name, a)
		}
	}
}

const coordinationGroup = "coordination.k8s.io"

// TestRBACOptionalGrants: the grants behind values appear only when asked for, in the
// namespaces named: source-scanner's ManagedCluster read, rule-engine limited to
// WATCH_NAMESPACES.
func TestRBACOptionalGrants(t *testing.T) {
	kube := kubeWithCRDs(t)
	for _, ns := range []string{"opt-enf", "opt-a", "opt-b"} {
		kube.Namespace(t, ns)
	}
	rel := release{name: "opt", namespace: "opt-enf"}
	install := func(name string, vals map[string]any) kubernetes.Interface {
		var user string
		for _, obj := range mustRender(t, name, rel, vals) {
			if !rbacKinds[obj.GetKind()] {
				continue
			}
			if err := kube.Client.Create(context.Background(), obj); err != nil {
				t.Fatalf("create %s %s: %v", obj.GetKind(), obj.GetName(), err)
			}
			if obj.GetKind() == "ServiceAccount" {
				user = "system:serviceaccount:" + obj.GetNamespace() + ":" + obj.GetName()
			}
		}
		return impersonate(t, kube.Config, user, rel.namespace)
	}

	scanner := install("source-scanner", map[string]any{"rbac": map[string]any{"managedClusters": true, "clusterProfiles": true}})
	for _, a := range verbs(ocmCluster, "managedclusters", "", "", "get", "list", "watch") {
		if !allowed(t, scanner, a) {
			t.Errorf("source-scanner with rbac.managedClusters may not %s", a)
		}
	}
	for _, a := range verbs("multicluster.x-k8s.io", "clusterprofiles", "", "fleet", "get", "list", "watch") {
		if !allowed(t, scanner, a) {
			t.Errorf("source-scanner with rbac.clusterProfiles may not %s", a)
		}
	}
	if a := (access{"update", ocmCluster, "managedclusters", "", ""}); allowed(t, scanner, a) {
		t.Errorf("source-scanner may %s", a)
	}

	engine := install("rule-engine", map[string]any{"config": map[string]any{"watchNamespaces": []any{"opt-a"}},
		"replicaCount": 1, "strategy": map[string]any{"type": "Recreate"}, "leaderElection": map[string]any{"enabled": false}})
	for _, a := range append(verbs(enfGroup, "clusterrules", "", "opt-a", "list", "watch", "patch"), verbs(enfGroup, "clusterrulegrants", "", "opt-enf", "list", "watch")...) {
		if !allowed(t, engine, a) {
			t.Errorf("rule-engine watching opt-a may not %s", a)
		}
	}
	for _, a := range append(verbs(enfGroup, "clusterrules", "", "opt-b", "list", "patch"), verbs(enfGroup, "clusterrules", "", "", "list")...) {
		if allowed(t, engine, a) {
			t.Errorf("rule-engine watching opt-a only may %s", a)
		}
	}
	if a := (access{"update", "coordination.k8s.io", "leases", "", "opt-enf"}); allowed(t, engine, a) {
		t.Errorf("rule-engine without leader election may %s", a)
	}

	rel = release{name: "opt-le", namespace: "opt-enf"}
	leader := install("rule-engine", map[string]any{"replicaCount": 2, "leaderElection": map[string]any{"enabled": true, "namespace": "opt-b"}})
	for _, a := range verbs("coordination.k8s.io", "leases", "", "opt-b", "get", "create", "update") {
		if !allowed(t, leader, a) {
			t.Errorf("rule-engine with leader election may not %s", a)
		}
	}
	if a := (access{"update", "coordination.k8s.io", "leases", "", "opt-a"}); allowed(t, leader, a) {
		t.Errorf("rule-engine with its Lease in opt-b may %s", a)
	}
}

// TestRBACRealRequests makes real API calls as argo-syncer's and policy-watcher's
// ServiceAccounts, so the test does not rest on SelfSubjectAccessReview alone: writing a Secret
// in the Argo CD namespace works and in the release namespace is forbidden; reading Secrets as
// policy-watcher is forbidden.
func TestRBACRealRequests(t *testing.T) {
	kube := kubeWithCRDs(t)
	for _, ns := range []string{rbacNS, opsNS, argoNS, teamNS, clusterNS} {
		kube.Namespace(t, ns)
	}
	ctx := context.Background()
	syncer := impersonate(t, kube.Config, installRBAC(t, kube.Client, "argo-syncer"), rbacNS)
	// Labelled as Enforcement's, as argo-syncer's Secrets are: its chart's admission policy
	// refuses it any other (TestArgoSyncerAdmissionFence).
	secret := func(ns string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cluster-real-request", Namespace: ns,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "enforcement"}}, StringData: map[string]string{"name": "c1"}}
	}
	if _, err := syncer.CoreV1().Secrets(argoNS).Create(ctx, secret(argoNS), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Errorf("argo-syncer creating a Secret in %s: %v", argoNS, err)
	}
	if _, err := syncer.CoreV1().Secrets(rbacNS).Create(ctx, secret(rbacNS), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("argo-syncer creating a Secret in %s: %v, want Forbidden", rbacNS, err)
	}
	watcher := impersonate(t, kube.Config, installRBAC(t, kube.Client, "policy-watcher"), rbacNS)
	if _, err := watcher.CoreV1().Secrets(clusterNS).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("policy-watcher listing Secrets: %v, want Forbidden", err)
	}
}
