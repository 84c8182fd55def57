package v1beta1

import (
	"fmt"
	"maps"
	"slices"

	"github.com/gobwas/glob"
)

// Glob reports whether text matches pattern with the glob syntax Argo CD's AppProject uses
// (github.com/gobwas/glob without separators: "*" also matches "/"). A pattern that does not
// compile matches nothing.
func Glob(pattern, text string) bool {
	if pattern == text {
		return true
	}
	g, err := glob.Compile(pattern)
	return err == nil && g.Match(text)
}

// anyGlob reports whether text matches one of patterns.
func anyGlob(patterns []string, text string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return Glob(p, text) })
}

// Covers reports whether the grant covers ClusterRules in namespace ns.
func (g *ClusterRuleGrantSpec) Covers(ns string) bool { return anyGlob(g.SourceNamespaces, ns) }

// PermitsSource reports whether the grant lets a rule read the source of kind through the
// Secret secretName ("" is the kind's default Secret, named after the kind).
func (g *ClusterRuleGrantSpec) PermitsSource(kind, secretName string) bool {
	if secretName == "" {
		secretName = kind
	}
	for _, s := range g.Sources {
		if s.Kind != kind {
			continue
		}
		if len(s.SecretNames) == 0 && secretName == kind || anyGlob(s.SecretNames, secretName) {
			return true
		}
	}
	return false
}

// PermitsRepo reports whether the grant allows the repository URL.
func (g *ClusterRuleGrantSpec) PermitsRepo(repo string) bool { return anyGlob(g.SourceRepos, repo) }

// PermitsNamespace reports whether the grant allows the destination namespace.
func (g *ClusterRuleGrantSpec) PermitsNamespace(ns string) bool {
	return anyGlob(g.DestinationNamespaces, ns)
}

// PermitsEndpoint reports whether the grant allows a trigger's endpoint.
func (g *ClusterRuleGrantSpec) PermitsEndpoint(endpoint string) bool {
	return anyGlob(g.WebhookEndpoints, endpoint)
}

// Validate reports the patterns that do not compile, which would otherwise silently match
// nothing.
func (g *ClusterRuleGrantSpec) Validate() error {
	lists := map[string][]string{"sourceNamespaces": g.SourceNamespaces, "sourceRepos": g.SourceRepos,
		"destinationNamespaces": g.DestinationNamespaces, "webhookEndpoints": g.WebhookEndpoints}
	for i, s := range g.Sources {
		lists[fmt.Sprintf("sources[%d].secretNames", i)] = s.SecretNames
	}
	for _, field := range slices.Sorted(maps.Keys(lists)) {
		for _, p := range lists[field] {
			if _, err := glob.Compile(p); err != nil {
				return fmt.Errorf("spec.%s: pattern %q: %w", field, p, err)
			}
		}
	}
	return nil
}
