package v1beta1

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// TestGrantPermits: the grant's patterns are Argo CD globs, and a source without secretNames
// allows only the kind's default Secret.
func TestGrantPermits(t *testing.T) {
	g := ClusterRuleGrantSpec{SourceNamespaces: []string{"team-*"}, Sources: []GrantSource{{Kind: "rancher"}, {Kind: "eks", SecretNames: []string{"eks-team-*"}}},
		SourceRepos: []string{"https://git.example.com/team-a/*"}, DestinationNamespaces: []string{"team-a-*"}}
	for _, c := range []struct {
		name string
		got  bool
		want bool
	}{
		{"covers team-a", g.Covers("team-a"), true},
		{"covers enforcement", g.Covers("enforcement"), false},
		{"default rancher Secret", g.PermitsSource("rancher", ""), true},
		{"named default rancher Secret", g.PermitsSource("rancher", "rancher"), true},
		{"other rancher Secret", g.PermitsSource("rancher", "rancher-prod"), false},
		{"eks pattern", g.PermitsSource("eks", "eks-team-a"), true},
		{"eks default", g.PermitsSource("eks", ""), false},
		{"gke", g.PermitsSource("gke", ""), false},
		{"repo below", g.PermitsRepo("https://git.example.com/team-a/apps/x"), true},
		{"other repo", g.PermitsRepo("https://git.example.com/team-b/x"), false},
		{"namespace", g.PermitsNamespace("team-a-web"), true},
		{"kube-system", g.PermitsNamespace("kube-system"), false},
		{"no endpoints", g.PermitsEndpoint("https://x"), false},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if err := (&ClusterRuleGrantSpec{SourceRepos: []string{"[a"}}).Validate(); err == nil {
		t.Error("an unclosed class validates")
	}
}

// TestGrantSourceKindEnumListsEverySource: the CRD's enum for a grant's source kind is written by
// hand in a marker; a source added to events.SourceKinds without it would make every grant naming
// it invalid on the API server.
func TestGrantSourceKindEnumListsEverySource(t *testing.T) {
	src, err := os.ReadFile("clusterrulegrant_types.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*// \+kubebuilder:validation:Enum=(\S+)\n\s*Kind string`).FindSubmatch(src)
	if m == nil {
		t.Fatal("no enum marker on GrantSource.Kind")
	}
	if got, want := string(m[1]), strings.Join(events.SourceKinds, ";"); got != want {
		t.Errorf("GrantSource.Kind enum = %s, want %s (events.SourceKinds)", got, want)
	}
}
