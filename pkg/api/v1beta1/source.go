package v1beta1

import (
	"errors"
	"strings"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// ErrNoSourceKind says a source sets none of its kinds (the CRD's validation rejects such a
// rule; a rule decoded without the API server may still have one).
var ErrNoSourceKind = errors.New("source: no source kind set (want one of rancher, static, eks, gke, ocm, aks, clusterProfile)")

// Ref returns the cluster source the rule reads: its kind, its Secret in secretNamespace
// (OPERATOR_NAMESPACE; spec.source.secretName, default the kind) and its id over the kind's
// identity filters (events.RancherSourceFilters, StaticSourceFilters, EKSSourceFilters,
// GKESourceFilters plus the gke filter expression, AKSSourceFilters, ClusterProfileSourceFilters; none for ocm). It is the one derivation of a rule's source: source-scanner
// lists and publishes under this id and rule-engine selects the clusters of this id, so the two
// always agree. With no kind set it returns ErrNoSourceKind.
func (s *Source) Ref(secretNamespace string) (events.SourceRef, error) {
	var (
		kind    string
		filters map[string]string
	)
	switch {
	case s.Rancher != nil:
		kind, filters = events.SourceKindRancher, events.RancherSourceFilters(s.Rancher.Filters)
	case s.Static != nil:
		kind, filters = events.SourceKindStatic, events.StaticSourceFilters(s.Static.ConfigMap)
	case s.EKS != nil:
		kind, filters = events.SourceKindEKS, events.EKSSourceFilters(s.EKS.Regions)
	case s.GKE != nil:
		kind, filters = events.SourceKindGKE, events.GKESourceFilters(s.GKE.Projects, s.GKE.Filters)
		if expr := strings.TrimSpace(s.GKE.Filter); expr != "" {
			// The expression narrows the listing, so it is part of the source, as the map is.
			if filters == nil {
				filters = map[string]string{}
			}
			filters[events.SourceFilterExpression] = expr
		}
	case s.OCM != nil:
		kind = events.SourceKindOCM
	case s.AKS != nil:
		kind, filters = events.SourceKindAKS, events.AKSSourceFilters(s.AKS.Subscriptions, s.AKS.ResourceGroups)
	case s.ClusterProfile != nil:
		kind, filters = events.SourceKindClusterProfile, events.ClusterProfileSourceFilters(s.ClusterProfile.Namespaces)
	default:
		return events.SourceRef{}, ErrNoSourceKind
	}
	return events.NewSourceRef(kind, secretNamespace, s.SecretName, filters), nil
}

// ConfigMapName is the ConfigMap a static source reads: configMap, or
// events.DefaultStaticConfigMap when it is empty.
func (s *StaticSource) ConfigMapName() string {
	if s.ConfigMap == "" {
		return events.DefaultStaticConfigMap
	}
	return s.ConfigMap
}
