package main

import (
	"context"
	"slices"
	"strconv"
	"testing"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestNewClusterIntentsShareTheirRepositories: the intents a new cluster gets from several rules
// each carry every rule's repository, so argo-syncer writes the cluster's AppProject once; a rule
// added later sends its own repository alone.
func TestNewClusterIntentsShareTheirRepositories(t *testing.T) {
	pub := &recordingPublisher{}
	e := testEngine(newMemStore(), pub, newMetrics(nil))
	ctx := context.Background()
	addRule := func(name string, repos ...string) {
		t.Helper()
		var enfs []v1beta1.Enforcement
		for i, repo := range repos {
			enfs = append(enfs, v1beta1.Enforcement{Name: name + "-" + strconv.Itoa(i), Repo: repo, Path: "charts"})
		}
		cr := &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: "enforcement", Name: name, UID: types.UID(name), Generation: 1},
			Spec: v1beta1.ClusterRuleSpec{Enforcements: enfs, Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}}}
		if err := e.applyRule(ctx, ruleFromSpec(cr, "enforcement")); err != nil {
			t.Fatal(err)
		}
	}
	addRule("monitoring", "https://git.example/monitoring", "https://git.example/shared")
	addRule("policies", "https://git.example/policies", "https://git.example/shared")
	if err := e.applyCluster(ctx, testCluster("a", nil, true), 1, 0); err != nil {
		t.Fatal(err)
	}
	want := []string{"https://git.example/monitoring", "https://git.example/policies", "https://git.example/shared"}
	installs := pub.installs()
	if len(installs) != 4 {
		t.Fatalf("%d install intents, want 4", len(installs))
	}
	for _, in := range installs {
		if !slices.Equal(in.ProjectRepos, want) {
			t.Errorf("%s: project repositories %v, want %v", in.Enforcement.Name, in.ProjectRepos, want)
		}
	}

	addRule("ingress", "https://git.example/ingress")
	installs = pub.installs()[4:]
	if len(installs) != 1 || installs[0].ProjectRepos != nil {
		t.Errorf("the later rule's intents: %+v, want one without project repositories", installs)
	}
}

// TestProjectReposLeaveTenantIntentsAlone: an intent under a ClusterRuleGrant goes to the grant's
// AppProject, so it neither gets nor gives repositories; one intent alone gets none either.
func TestProjectReposLeaveTenantIntentsAlone(t *testing.T) {
	install := func(cluster, repo string, grant *events.Grant) *events.InstallIntent {
		return &events.InstallIntent{Cluster: events.Target{Name: cluster}, Enforcement: events.Enforcement{Repo: repo}, Grant: grant}
	}
	a1, a2 := install("a", "https://git.example/one", nil), install("a", "https://git.example/two", nil)
	tenant := install("a", "https://git.example/team", &events.Grant{Name: "team"})
	alone := install("b", "https://git.example/one", nil)
	shareProjectRepos([]events.Event{a1, tenant, &events.UninstallIntent{}, a2, alone})
	if want := []string{"https://git.example/one", "https://git.example/two"}; !slices.Equal(a1.ProjectRepos, want) || !slices.Equal(a2.ProjectRepos, want) {
		t.Errorf("cluster a: %v and %v, want %v", a1.ProjectRepos, a2.ProjectRepos, want)
	}
	if tenant.ProjectRepos != nil || alone.ProjectRepos != nil {
		t.Errorf("tenant intent %v, single intent %v, want none", tenant.ProjectRepos, alone.ProjectRepos)
	}
}
