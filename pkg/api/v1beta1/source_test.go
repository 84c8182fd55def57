package v1beta1

import (
	"errors"
	"testing"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// TestSourceRefGolden pins the source of one rule per kind and identity filter. The ids are the
// ones source-scanner and rule-engine computed before the derivation moved here; inventories and
// subjects are keyed by them, so they must never change.
func TestSourceRefGolden(t *testing.T) {
	tests := []struct {
		name   string
		src    Source
		secret string
		id     string
	}{
		{"rancher filters", Source{Rancher: &RancherSource{Filters: map[string]string{"driver": "googleKubernetesEngine"},
			Labels: map[string]string{"cattle.io/creator": "norman"}, Ignore: []string{"cluster1"}}}, "rancher", "d79ab3e43ffbc255"},
		{"rancher secretName", Source{SecretName: "rancher-secret", Rancher: &RancherSource{Filters: map[string]string{"driver": "googleKubernetesEngine"}}},
			"rancher-secret", "6470fe37a45da918"},
		{"rancher no filters", Source{Rancher: &RancherSource{}}, "rancher", "9c2fe8081654e22d"},
		{"rancher empty filters", Source{Rancher: &RancherSource{Filters: map[string]string{}}}, "rancher", "9c2fe8081654e22d"},
		{"static default", Source{Static: &StaticSource{}}, "static", "4af7e3c0b3078a02"},
		{"static default named", Source{Static: &StaticSource{ConfigMap: events.DefaultStaticConfigMap}}, "static", "4af7e3c0b3078a02"},
		{"static other ConfigMap", Source{Static: &StaticSource{ConfigMap: "lab"}}, "static", "7906d3c1a9d1a923"},
		{"eks no regions", Source{EKS: &EKSSource{Tags: map[string]string{"env": "prod"}}}, "eks", "0e3d75086adfe509"},
		{"eks regions unsorted, spaced, duplicated", Source{SecretName: "eks-keys", EKS: &EKSSource{Regions: []string{"us-east-1", " eu-west-1", "us-east-1"}}},
			"eks-keys", "01348ff4cf719903"},
		{"eks regions sorted", Source{SecretName: "eks-keys", EKS: &EKSSource{Regions: []string{"eu-west-1", "us-east-1"}}}, "eks-keys", "01348ff4cf719903"},
		{"gke projects and filters", Source{GKE: &GKESource{Projects: []string{"b", "a"}, Filters: map[string]string{"location": "europe-*"}}}, "gke", "f111a8b5dbf9f730"},
		{"gke filters only", Source{GKE: &GKESource{Filters: map[string]string{"location": "europe-*"}}}, "gke", "aee214489ceaedb6"},
		{"aks subscriptions and resource groups, any case", Source{AKS: &AKSSource{Subscriptions: []string{"SUB-B", "sub-a"}, ResourceGroups: []string{"RG", "rg"}}}, "aks", "f626eab6c3c415cf"},
		{"ocm", Source{OCM: &OCMSource{Claims: map[string]string{"x": "y"}}}, "ocm", "9c0f40783f8a737f"},
		{"ocm secretName", Source{SecretName: "hub", OCM: &OCMSource{}}, "hub", "4bde43c3b2b5b320"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ref, err := tt.src.Ref("enforcement")
			if err != nil {
				t.Fatal(err)
			}
			if ref.ID != tt.id || ref.SecretName != tt.secret || ref.SecretNamespace != "enforcement" {
				t.Errorf("Ref = %+v, want id %s, Secret enforcement/%s", ref, tt.id, tt.secret)
			}
		})
	}
}

func TestSourceRefKinds(t *testing.T) {
	for kind, src := range map[string]Source{
		events.SourceKindRancher:        {Rancher: &RancherSource{}},
		events.SourceKindStatic:         {Static: &StaticSource{}},
		events.SourceKindEKS:            {EKS: &EKSSource{}},
		events.SourceKindGKE:            {GKE: &GKESource{}},
		events.SourceKindOCM:            {OCM: &OCMSource{}},
		events.SourceKindAKS:            {AKS: &AKSSource{}},
		events.SourceKindClusterProfile: {ClusterProfile: &ClusterProfileSource{}},
	} {
		ref, err := src.Ref("ns")
		if err != nil {
			t.Fatal(err)
		}
		if ref.Kind != kind || ref.SecretName != kind || ref.ID != events.SourceID(kind, "ns", kind, nil) {
			t.Errorf("%s: Ref = %+v", kind, ref)
		}
	}
	if _, err := (&Source{SecretName: "x"}).Ref("ns"); !errors.Is(err, ErrNoSourceKind) {
		t.Errorf("no kind: err = %v, want ErrNoSourceKind", err)
	}
}

func TestStaticConfigMapName(t *testing.T) {
	if got := (&StaticSource{}).ConfigMapName(); got != events.DefaultStaticConfigMap {
		t.Errorf("default = %q", got)
	}
	if got := (&StaticSource{ConfigMap: "lab"}).ConfigMapName(); got != "lab" {
		t.Errorf("named = %q", got)
	}
}
