package main

import (
	"fmt"

	"github.com/enforcement-io/enforcement/pkg/api/gcloudfilter"
	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// selection is a compiled ClusterRule source: which source it reads and which of that source's
// clusters it selects. It is built once per rule generation, so matching a cluster costs map
// lookups only.
type selection struct {
	source events.SourceRef
	labels map[string]string // the source's own exact-subset labels (or tags)
	claims map[string]string // ocm: ClusterClaims that must have these values
	// claimsAttr is the attribute claims are read from: the OCM ClusterClaims, or a
	// ClusterProfile's status.properties.
	claimsAttr string
	ignore     map[string]bool
	selector   labels.Selector // matchLabels + matchExpressions; nil when neither is set
	// sourceSelector is the source's own label selector (clusterProfile.selector); nil when unset.
	sourceSelector labels.Selector
	// grant is the cluster selector of the rule's ClusterRuleGrant (tenancy.go): nil for a rule
	// of OPERATOR_NAMESPACE or a grant without one. denyAll is set for a rule no grant allows.
	grant   labels.Selector
	denyAll bool
}

// compileSelection reads a rule's source. secretNamespace is OPERATOR_NAMESPACE, where source
// Secrets live. It fails on a spec the CRD schema cannot reject: no source kind, label
// expressions Kubernetes does not accept, or a GKE filter expression gcloud's grammar does not
// accept (the status then shows the expression and where it is wrong).
func compileSelection(src v1beta1.Source, secretNamespace string) (*selection, error) {
	// The source (kind, Secret, identity filters) is derived where source-scanner derives it,
	// so the rule selects among the clusters the scanner published under that id.
	ref, err := src.Ref(secretNamespace)
	if err != nil {
		return nil, err
	}
	var (
		lbls, claims map[string]string
		claimsAttr   = ocmClaimsAttribute
		ignore       []string
		srcSelector  *metav1.LabelSelector
	)
	switch {
	case src.Rancher != nil:
		lbls, ignore = src.Rancher.Labels, src.Rancher.Ignore
	case src.Static != nil:
		lbls, ignore = src.Static.Labels, src.Static.Ignore
	case src.EKS != nil:
		lbls, ignore = src.EKS.Tags, src.EKS.Ignore
	case src.GKE != nil:
		lbls, ignore = src.GKE.Tags, src.GKE.Ignore
		// The scanner applies the expression; it is checked here too so that a typo is the
		// rule's InvalidSpec at once, not a degraded source after the next scan.
		if _, err := gcloudfilter.Compile(src.GKE.Filter); err != nil {
			return nil, fmt.Errorf("source.gke.filter: %w", err)
		}
	case src.OCM != nil:
		lbls, claims, ignore = src.OCM.Labels, src.OCM.Claims, src.OCM.Ignore
	case src.AKS != nil:
		lbls, ignore = src.AKS.Tags, src.AKS.Ignore
	case src.ClusterProfile != nil:
		claims, claimsAttr, ignore = src.ClusterProfile.Properties, clusterProfilePropertiesAttribute, src.ClusterProfile.Ignore
		srcSelector = src.ClusterProfile.Selector
	}
	s := &selection{
		source:     ref,
		labels:     lbls,
		claims:     claims,
		claimsAttr: claimsAttr,
		ignore:     make(map[string]bool, len(ignore)),
	}
	if srcSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(srcSelector)
		if err != nil {
			return nil, fmt.Errorf("source.clusterProfile.selector: %w", err)
		}
		s.sourceSelector = sel
	}
	for _, name := range ignore {
		s.ignore[name] = true
	}
	if len(src.MatchLabels) > 0 || len(src.MatchExpressions) > 0 {
		sel, err := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{
			MatchLabels: src.MatchLabels, MatchExpressions: src.MatchExpressions})
		if err != nil {
			return nil, fmt.Errorf("source.matchLabels/matchExpressions: %w", err)
		}
		s.selector = sel
	}
	return s, nil
}

// selects reports whether the rule selects the cluster, regardless of its eligibility: same
// source, inside the rule's grant (tenancy.go), not ignored, every source label present with the
// same value, and the label selector (extension) satisfied.
func (s *selection) selects(c *events.Cluster) bool {
	if s.denyAll || c.Source.ID != s.source.ID {
		return false
	}
	if s.grant != nil && !s.grant.Matches(labels.Set(c.Labels)) {
		return false
	}
	if s.ignore[c.Name] {
		return false
	}
	for k, v := range s.labels {
		if got, ok := c.Labels[k]; !ok || got != v {
			return false
		}
	}
	if len(s.claims) > 0 && !hasClaims(c, s.claimsAttr, s.claims) {
		return false
	}
	if s.sourceSelector != nil && !s.sourceSelector.Matches(labels.Set(c.Labels)) {
		return false
	}
	return s.selector == nil || s.selector.Matches(labels.Set(c.Labels))
}

// ocmClaimsAttribute is where the OCM source publishes a cluster's ClusterClaims (name → value),
// and clusterProfilePropertiesAttribute where the clusterprofile source publishes a
// ClusterProfile's status.properties (name → value).
const (
	ocmClaimsAttribute                = "clusterClaims"
	clusterProfilePropertiesAttribute = "properties"
)

// hasClaims reports whether the cluster's claims (or properties) in the attribute attr have every
// wanted value. The OCM scanner also merges claims into the labels (labels win on a clash), so
// without the attribute the labels decide.
func hasClaims(c *events.Cluster, attr string, want map[string]string) bool {
	claims, ok := c.Attributes[attr].(map[string]any)
	for k, v := range want {
		if ok {
			if got, _ := claims[k].(string); got != v {
				return false
			}
		} else if c.Labels[k] != v {
			return false
		}
	}
	return true
}
