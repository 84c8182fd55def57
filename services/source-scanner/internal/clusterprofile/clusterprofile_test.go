package clusterprofile

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// profile is a ClusterProfile as an OCM or KubeFleet hub writes it.
func profile(healthy string) *unstructured.Unstructured {
	conds := []any{}
	if healthy != "" {
		conds = append(conds, map[string]any{"type": ConditionControlPlaneHealthy, "status": healthy, "reason": "R", "message": "m"})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "multicluster.x-k8s.io/v1alpha1",
		"kind":       "ClusterProfile",
		"metadata": map[string]any{"name": "member-1", "namespace": "fleet", "uid": "u-1",
			"labels": map[string]any{"x-k8s.io/cluster-manager": "fleet"}},
		"spec": map[string]any{"displayName": "Member 1", "clusterManager": map[string]any{"name": "fleet"}},
		"status": map[string]any{
			"conditions": conds,
			"version":    map[string]any{"kubernetes": "v1.31.2"},
			"properties": []any{map[string]any{"name": "location", "value": "eu-west"}},
			"credentialProviders": []any{
				map[string]any{"name": "token", "cluster": map[string]any{"server": "https://old.example.com"}},
				map[string]any{"name": "azure", "cluster": map[string]any{"server": "https://deprecated.example.com"}},
			},
			"accessProviders": []any{
				map[string]any{"name": "oidc", "cluster": map[string]any{"server": "https://oidc.example.com"}},
				map[string]any{"name": "azure", "cluster": map[string]any{"server": "https://member-1.example.com:443", "certificate-authority-data": "Q0E="}},
			},
		},
	}}
}

var azure = Providers{Providers: []Provider{{Name: "azure", ExecConfig: &ExecConfig{
	APIVersion: "client.authentication.k8s.io/v1beta1", Command: "kubelogin", Args: []string{"get-token", "--login", "workloadidentity"}}}}}

func TestConvert(t *testing.T) {
	c := Convert(profile("True"), azure)
	if c.Key != "fleet/member-1" || c.Name != "member-1" || !c.Eligible || c.State != StateHealthy {
		t.Errorf("cluster %+v", c)
	}
	// The configured provider wins over an earlier unconfigured one, and accessProviders over
	// the deprecated credentialProviders of the same name.
	if c.URL != "https://member-1.example.com:443" || c.Attributes[AttrAccessProvider] != "azure" {
		t.Errorf("url %q provider %v", c.URL, c.Attributes[AttrAccessProvider])
	}
	if c.Attributes[AttrArgoCDCAData] != "Q0E=" || c.Attributes[AttrArgoCDExecCommand] != "kubelogin" ||
		c.Attributes[AttrArgoCDExecAPIVersion] != "client.authentication.k8s.io/v1beta1" {
		t.Errorf("hints %v", c.Attributes)
	}
	if args, _ := c.Attributes[AttrArgoCDExecArgs].([]any); len(args) != 3 || args[2] != "workloadidentity" {
		t.Errorf("exec args %v", c.Attributes[AttrArgoCDExecArgs])
	}
	if p, _ := c.Attributes[AttrProperties].(map[string]string); p["location"] != "eu-west" {
		t.Errorf("properties %v", c.Attributes[AttrProperties])
	}
	if c.Attributes[AttrKubernetesVersion] != "v1.31.2" || c.Attributes[AttrClusterManager] != "fleet" || c.Labels["x-k8s.io/cluster-manager"] != "fleet" {
		t.Errorf("attributes %v labels %v", c.Attributes, c.Labels)
	}

	// Without a configuration: the first provider's server, no exec hints.
	c = Convert(profile("True"), Providers{})
	if c.URL != "https://oidc.example.com" || c.Attributes[AttrArgoCDExecCommand] != nil {
		t.Errorf("unconfigured: url %q attributes %v", c.URL, c.Attributes)
	}
}

// Present but not healthy: listed, not eligible.
func TestEligibility(t *testing.T) {
	for healthy, want := range map[string]string{"True": StateHealthy, "False": StateUnhealthy, "Unknown": StateUnknown, "": StateUnknown} {
		c := Convert(profile(healthy), azure)
		if c.State != want || c.Eligible != (want == StateHealthy) {
			t.Errorf("ControlPlaneHealthy=%q: state %s eligible %v", healthy, c.State, c.Eligible)
		}
	}
}

// Each invalid providers configuration names the key and what is wrong.
func TestParseProviders(t *testing.T) {
	if p, err := ParseProviders(nil); err != nil || len(p.Providers) != 0 {
		t.Errorf("no key: %v %v", p, err)
	}
	p, err := ParseProviders(map[string][]byte{SecretKeyProviders: []byte(`{"providers":[{"name":"azure","execConfig":{"apiVersion":"v","command":"kubelogin"}}]}`)})
	if err != nil || p.lookup("azure") == nil {
		t.Errorf("valid: %v %v", p, err)
	}
	for raw, want := range map[string]string{
		`{"providers": [`: `key "providers" is not a providers configuration`,
		`{"providers":[{"execConfig":{"apiVersion":"v","command":"c"}}]}`: `provider #0 has no name`,
		`{"providers":[{"name":"a"}]}`:                                    `provider "a" has no execConfig.command`,
		`{"providers":[{"name":"a","execConfig":{"command":"c"}}]}`:       `provider "a" has no execConfig.apiVersion`,
	} {
		_, err := ParseProviders(map[string][]byte{SecretKeyProviders: []byte(raw)})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", raw, err, want)
		}
	}
}
