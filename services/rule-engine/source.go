package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

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
	labels   map[string]string // the source's own exact-subset labels (or tags, or claims)
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
	switch {
	case src.Rancher != nil:
		kind, filters, lbls, ignore = "rancher", src.Rancher.Filters, src.Rancher.Labels, src.Rancher.Ignore
	case src.Static != nil:
		kind, lbls, ignore = "static", src.Static.Labels, src.Static.Ignore
	case src.EKS != nil:
		kind, lbls, ignore = "eks", src.EKS.Tags, src.EKS.Ignore
	case src.GKE != nil:
		kind, filters, lbls, ignore = "gke", src.GKE.Filters, src.GKE.Tags, src.GKE.Ignore
	case src.OCM != nil:
		// Assumption shared with source-scanner: ManagedCluster labels and ClusterClaims both
		// arrive as cluster labels, so claims select like labels.
		kind, lbls, ignore = "ocm", mergeMaps(src.OCM.Labels, src.OCM.Claims), src.OCM.Ignore
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
	return s.selector == nil || s.selector.Matches(labels.Set(c.Labels))
}

func mergeMaps(a, b map[string]string) map[string]string {
	if len(b) == 0 {
		return a
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
