package main

import (
	"strings"
	"testing"

	argov1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// TestRenderTenantProjectIsTheGrant: a grant's AppProject allows exactly the grant's
// repositories, its namespaces on its own cluster only, and no cluster-scoped kind unless the
// grant lists it; its name never equals a cluster's own project.
func TestRenderTenantProjectIsTheGrant(t *testing.T) {
	g := &events.Grant{Name: "team-a", SourceRepos: []string{"https://git.example.com/team-a/*"}, DestinationNamespaces: []string{"team-a-*"}}
	name := TenantProjectName("prod-1", "team-a")
	if name == ProjectName("prod-1") || !strings.HasPrefix(name, "prod-1-team-a-") || len(name) != len("prod-1-team-a-")+16 {
		t.Fatalf("TenantProjectName = %q", name)
	}
	o := RenderTenantProject("argocd", name, "prod-1", "https://k8s.example", g)
	spec := o.Spec.(argov1.AppProjectSpec)
	if strings.Join(spec.SourceRepos, ",") != "https://git.example.com/team-a/*" {
		t.Errorf("source repos %v", spec.SourceRepos)
	}
	want := []argov1.ApplicationDestination{{Server: "https://k8s.example", Namespace: "team-a-*"}, {Name: "prod-1", Namespace: "team-a-*"}}
	if len(spec.Destinations) != 2 || spec.Destinations[0] != want[0] || spec.Destinations[1] != want[1] {
		t.Errorf("destinations %+v, want %+v", spec.Destinations, want)
	}
	if len(spec.ClusterResourceWhitelist) != 0 {
		t.Errorf("cluster resources %v, want none", spec.ClusterResourceWhitelist)
	}
	if o.Metadata.Annotations[AnnotationGrant] != "team-a" || o.Metadata.Annotations[AnnotationCluster] != "prod-1" || o.Metadata.Labels[LabelManagedBy] != ManagedByValue {
		t.Errorf("metadata %+v", o.Metadata)
	}
	g.ClusterResources = []events.GroupKind{{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}}
	spec = RenderTenantProject("argocd", name, "prod-1", "", g).Spec.(argov1.AppProjectSpec)
	if len(spec.ClusterResourceWhitelist) != 1 || spec.ClusterResourceWhitelist[0].Kind != "ClusterRole" || len(spec.Destinations) != 1 {
		t.Errorf("with cluster resources and no URL: %+v", spec)
	}
}
