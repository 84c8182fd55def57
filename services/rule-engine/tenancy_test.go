package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// tenantClient is a client that impersonates user, who may only do with ClusterRules what a
// Role in ns allows (the RBAC a tenant needs, as the chart README documents it).
func tenantClient(t *testing.T, e *env, user string) client.Client {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "clusterrule-author"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"enforcement.globo.com"}, Resources: []string{"clusterrules"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "clusterrule-author"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}}}
	for _, o := range []client.Object{role, binding} {
		if err := e.c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(e.kube.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1beta1.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTenantActsOnlyWithinItsGrant: a user who may create ClusterRules in the team's namespace
// only (impersonated on the real API server with RBAC) cannot read the operator's Secrets, write
// grants or rules elsewhere; its rules act only within the operator's ClusterRuleGrant: the
// grant's clusters (the others are neither installed nor named in the status), repositories,
// destination namespaces, source Secrets and webhook endpoints; anything else is NotPermitted
// with no intent, while its permitted rule carries on. Narrowing and then deleting the grant
// holds the removals (the user's release annotation releases nothing) until the operator's
// release.
func TestTenantActsOnlyWithinItsGrant(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// Replace the test's allow-everything grant by the team's grant.
	if err := e.c.Delete(ctx, &v1beta1.ClusterRuleGrant{ObjectMeta: metav1.ObjectMeta{Namespace: "enforcement", Name: e.ns}}); err != nil {
		t.Fatal(err)
	}
	grant := &v1beta1.ClusterRuleGrant{ObjectMeta: metav1.ObjectMeta{Namespace: "enforcement", Name: "team-" + e.ns},
		Spec: v1beta1.ClusterRuleGrantSpec{
			SourceNamespaces:      []string{e.ns},
			Sources:               []v1beta1.GrantSource{{Kind: "rancher"}},
			ClusterSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "team-a"}},
			SourceRepos:           []string{"https://git.example.com/team-a/*"},
			DestinationNamespaces: []string{"team-a-*"},
			WebhookEndpoints:      []string{"https://hooks.example.com/team-a/*"},
		}}
	if err := e.c.Create(ctx, grant); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), grant) })
	alice := tenantClient(t, e, "alice")
	e.start()

	// What RBAC keeps from the tenant: the operator's Secrets, grants, rules elsewhere.
	if err := alice.Get(ctx, types.NamespacedName{Namespace: "enforcement", Name: "rancher"}, &corev1.Secret{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice reads a source Secret: %v", err)
	}
	mine := &v1beta1.ClusterRuleGrant{ObjectMeta: metav1.ObjectMeta{Namespace: "enforcement", Name: "mine"},
		Spec: v1beta1.ClusterRuleGrantSpec{SourceNamespaces: []string{"*"}, Sources: []v1beta1.GrantSource{{Kind: "rancher"}},
			SourceRepos: []string{"*"}, DestinationNamespaces: []string{"*"}}}
	if err := alice.Create(ctx, mine); !apierrors.IsForbidden(err) {
		t.Errorf("alice creates a grant: %v", err)
	}
	elsewhere := &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: "enforcement", Name: "x"},
		Spec: v1beta1.ClusterRuleSpec{Enforcements: []v1beta1.Enforcement{{Name: "x", Repo: "https://git.example.com/team-a/x"}},
			Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}}}
	if err := alice.Create(ctx, elsewhere); !apierrors.IsForbidden(err) {
		t.Errorf("alice creates a rule in the operator namespace: %v", err)
	}

	for i, tenant := range []string{"team-a", "team-a", "team-a", "team-b"} {
		e.publish(appeared(testCluster(fmt.Sprintf("c%d", i), map[string]string{"tenant": tenant, "tier": map[bool]string{true: "gold"}[i == 0]}, true), 1))
	}
	create := func(name string, mutate func(*v1beta1.ClusterRuleSpec)) {
		t.Helper()
		spec := v1beta1.ClusterRuleSpec{Enforcements: []v1beta1.Enforcement{{Name: name, Repo: "https://git.example.com/team-a/app", Namespace: "team-a-app"}},
			Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}}
		if mutate != nil {
			mutate(&spec)
		}
		if err := alice.Create(ctx, &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name}, Spec: spec}); err != nil {
			t.Fatalf("alice creates rule %s: %v", name, err)
		}
	}
	create("app", nil)
	denied := map[string]struct {
		mutate func(*v1beta1.ClusterRuleSpec)
		want   string
	}{
		"repo":      {func(s *v1beta1.ClusterRuleSpec) { s.Enforcements[0].Repo = "https://git.example.com/team-b/app" }, "does not allow repository https://git.example.com/team-b/app"},
		"namespace": {func(s *v1beta1.ClusterRuleSpec) { s.Enforcements[0].Namespace = "kube-system" }, "does not allow destination namespace kube-system"},
		"defaultns": {func(s *v1beta1.ClusterRuleSpec) { s.Enforcements[0].Namespace = "" }, "does not allow destination namespace default"},
		"secret":    {func(s *v1beta1.ClusterRuleSpec) { s.Source.SecretName = "rancher-prod" }, "allows source rancher with Secret rancher-prod"},
		"kind":      {func(s *v1beta1.ClusterRuleSpec) { s.Source = v1beta1.Source{Static: &v1beta1.StaticSource{}} }, "allows source static with Secret static"},
		"hook": {func(s *v1beta1.ClusterRuleSpec) {
			s.Triggers = &v1beta1.Triggers{AfterInstall: &v1beta1.Trigger{Endpoint: "https://user:pw@evil.example.com/x"}}
		}, "does not allow the afterInstall endpoint https://redacted@evil.example.com/x"},
	}
	for name, d := range denied {
		create(name, d.mutate)
	}
	for name, d := range denied {
		e.waitReady(name, v1beta1.ReasonNotPermitted, func(st v1beta1.ClusterRuleStatus) error {
			msg := st.Conditions[0].Message
			if !strings.Contains(msg, d.want) || strings.Contains(msg, "pw") || st.MatchedClusters != 0 || len(st.Clusters) != 0 {
				return fmt.Errorf("status %+v, want a message with %q and no cluster", st, d.want)
			}
			return nil
		})
	}
	// Only the granted clusters, and only they are named; the intents carry the grant.
	e.waitReady("app", v1beta1.ReasonProgressing, func(st v1beta1.ClusterRuleStatus) error {
		if st.MatchedClusters != 3 || len(st.Clusters) != 3 || st.Clusters[2].Name != "c2" {
			return fmt.Errorf("clusters %+v, want c0, c1, c2", st.Clusters)
		}
		return nil
	})
	installs := e.waitIntentSet("install c0 app", "install c1 app", "install c2 app")
	for _, ev := range installs {
		g := ev.(*events.InstallIntent).Grant
		if g == nil || g.Name != grant.Name || strings.Join(g.SourceRepos, ",") != "https://git.example.com/team-a/*" ||
			strings.Join(g.DestinationNamespaces, ",") != "team-a-*" || len(g.ClusterResources) != 0 {
			t.Fatalf("intent grant %+v", g)
		}
	}

	// Narrowing the grant to gold clusters: two removals of three installed, over the breaker's
	// cap of one, are held; the status does not name them.
	updateGrant := func(mutate func(*v1beta1.ClusterRuleGrant)) {
		t.Helper()
		var g v1beta1.ClusterRuleGrant
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(grant), &g); err != nil {
			t.Fatal(err)
		}
		mutate(&g)
		if err := e.c.Update(ctx, &g); err != nil {
			t.Fatal(err)
		}
	}
	updateGrant(func(g *v1beta1.ClusterRuleGrant) { g.Spec.ClusterSelector.MatchLabels["tier"] = "gold" })
	e.waitReady("app", v1beta1.ReasonRemovalsHeld, func(st v1beta1.ClusterRuleStatus) error {
		msg := st.Conditions[0].Message
		if !strings.Contains(msg, "no longer selects 2 of the 3") || strings.Contains(msg, "c1") || strings.Contains(msg, "c2") {
			return fmt.Errorf("message %q", msg)
		}
		return nil
	})
	// c0 stays: its install is sent again with the changed grant, so that argo-syncer rewrites
	// its AppProject; nothing is uninstalled.
	installed := []string{"install c0 app", "install c1 app", "install c2 app", "install c0 app"}
	e.waitIntentSet(installed...)
	// Deleting it: the rule is not permitted, and its three removals are held.
	if err := e.c.Delete(ctx, grant); err != nil {
		t.Fatal(err)
	}
	e.waitReady("app", v1beta1.ReasonNotPermitted, func(st v1beta1.ClusterRuleStatus) error {
		if msg := st.Conditions[0].Message; !strings.Contains(msg, "no ClusterRuleGrant in enforcement covers namespace "+e.ns) ||
			!strings.Contains(msg, "no longer selects 3 of the 3") || st.MatchedClusters != 0 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	// The tenant's release annotation releases nothing.
	var cr v1beta1.ClusterRule
	if err := alice.Get(ctx, types.NamespacedName{Namespace: e.ns, Name: "app"}, &cr); err != nil {
		t.Fatal(err)
	}
	cr.Annotations = map[string]string{ReleaseAnnotation: fmt.Sprintf("generation/%d", cr.Generation)}
	if err := alice.Update(ctx, &cr); err != nil {
		t.Fatal(err)
	}
	e.waitReady("app", v1beta1.ReasonNotPermitted, func(st v1beta1.ClusterRuleStatus) error {
		if !strings.Contains(st.Conditions[0].Message, "the annotation counts only on rules in enforcement") {
			return fmt.Errorf("message %q", st.Conditions[0].Message)
		}
		return nil
	})
	e.waitIntentSet(installed...)
	// The operator's release removes them.
	e.publish(&events.RuleRemovalsReleased{Rule: events.RuleRef{Namespace: e.ns, Name: "app", Generation: cr.Generation}, By: "ops"})
	e.waitIntentSet(append(installed, "uninstall c0 app NoLongerMatches", "uninstall c1 app NoLongerMatches", "uninstall c2 app NoLongerMatches")...)
	e.waitReady("app", v1beta1.ReasonNotPermitted, nil)
}
