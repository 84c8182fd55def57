package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// SourceID is the stable identity of one cluster source: the same (kind, Secret, filters) gives
// the same id in every service, so a ClusterRule finds the clusters the scanner listed for it.
// It is the first 16 hex digits of the SHA-256 of
//
//	kind \x00 secretNamespace \x00 secretName \x00 (k=v \x00 for each filter, sorted by key)
//
// source-scanner computes the same value; it belongs in pkg/events (reported as a wanted move).
func SourceID(kind, secretNamespace, secretName string, filters map[string]string) string {
	h := sha256.New()
	for _, s := range []string{kind, secretNamespace, secretName} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	keys := make([]string, 0, len(filters))
	for k := range filters {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		h.Write([]byte(k + "=" + filters[k]))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// selection is a compiled ClusterRule source: which source it reads and which of that source's
// clusters it selects. It is built once per rule generation, so matching a cluster costs map
// lookups only.
type selection struct {
	source   events.SourceRef
	labels   map[string]string // the source's own exact-subset labels (or tags)
	claims   map[string]string // ocm: ClusterClaims that must have these values
	ignore   map[string]bool
	selector labels.Selector // matchLabels + matchExpressions; nil when neither is set
}

// compileSelection reads a rule's source. secretNamespace is OPERATOR_NAMESPACE, where source
// Secrets live. It fails on a spec the CRD schema cannot reject: no source kind, or label
// expressions Kubernetes does not accept.
func compileSelection(src v1beta1.Source, secretNamespace string) (*selection, error) {
	var (
		kind    string
		filters map[string]string
		lbls    map[string]string
		ignore  []string
	)
	var claims map[string]string
	// The filters are what source-scanner puts into the identity too (its sourceOf and the
	// eks/gke SourceFilters): two rules that list differently are two sources.
	switch {
	case src.Rancher != nil:
		kind, filters, lbls, ignore = "rancher", src.Rancher.Filters, src.Rancher.Labels, src.Rancher.Ignore
	case src.Static != nil:
		kind, lbls, ignore = "static", src.Static.Labels, src.Static.Ignore
		if cm := src.Static.ConfigMap; cm != "" && cm != defaultStaticConfigMap {
			filters = map[string]string{"configMap": cm}
		}
	case src.EKS != nil:
		kind, lbls, ignore = "eks", src.EKS.Tags, src.EKS.Ignore
		if rs := normaliseList(src.EKS.Regions); len(rs) > 0 {
			filters = map[string]string{"regions": strings.Join(rs, ",")}
		}
	case src.GKE != nil:
		kind, lbls, ignore = "gke", src.GKE.Tags, src.GKE.Ignore
		filters = mergeMaps(src.GKE.Filters, nil)
		if ps := normaliseList(src.GKE.Projects); len(ps) > 0 {
			filters = mergeMaps(filters, map[string]string{"projects": strings.Join(ps, ",")})
		}
	case src.OCM != nil:
		kind, lbls, claims, ignore = "ocm", src.OCM.Labels, src.OCM.Claims, src.OCM.Ignore
	default:
		return nil, fmt.Errorf("source: no source kind set (want one of rancher, static, eks, gke, ocm)")
	}
	secretName := src.SecretName
	if secretName == "" {
		secretName = kind
	}
	s := &selection{
		source: events.SourceRef{
			Kind:            kind,
			ID:              SourceID(kind, secretNamespace, secretName, filters),
			SecretNamespace: secretNamespace,
			SecretName:      secretName,
		},
		labels: lbls,
		claims: claims,
		ignore: make(map[string]bool, len(ignore)),
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
// source, not ignored, every source label present with the same value, and the label selector
// (extension) satisfied.
func (s *selection) selects(c *events.Cluster) bool {
	if c.Source.ID != s.source.ID || s.ignore[c.Name] {
		return false
	}
	for k, v := range s.labels {
		if got, ok := c.Labels[k]; !ok || got != v {
			return false
		}
	}
	if len(s.claims) > 0 && !hasClaims(c, s.claims) {
		return false
	}
	return s.selector == nil || s.selector.Matches(labels.Set(c.Labels))
}

// defaultStaticConfigMap is the ConfigMap a static source reads when the rule names none.
const defaultStaticConfigMap = "enforcement-static-clusters"

// ocmClaimsAttribute is where the OCM source publishes a cluster's ClusterClaims (name → value).
const ocmClaimsAttribute = "clusterClaims"

// hasClaims reports whether the cluster's ClusterClaims have every wanted value. The scanner also
// merges claims into the labels (labels win on a clash), so without the attribute the labels
// decide.
func hasClaims(c *events.Cluster, want map[string]string) bool {
	claims, ok := c.Attributes[ocmClaimsAttribute].(map[string]any)
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

// normaliseList trims, sorts and de-duplicates a list (regions, projects), dropping empties.
func normaliseList(in []string) []string {
	var out []string
	for _, s := range in {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func mergeMaps(a, b map[string]string) map[string]string {
	if len(a)+len(b) == 0 {
		return nil
	}
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
