package events

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strings"
)

// Source kinds: the value of SourceRef.Kind, and the field of a ClusterRule's spec.source that
// names the kind. Without spec.source.secretName, a source's Secret is named after its kind.
const (
	SourceKindRancher = "rancher"
	SourceKindStatic  = "static"
	SourceKindEKS     = "eks"
	SourceKindGKE     = "gke"
	SourceKindOCM     = "ocm"
	SourceKindAKS     = "aks"
	// SourceKindClusterProfile is set by spec.source.clusterProfile; the kind is lower case
	// because it names the default source Secret, and Secret names are lower case.
	SourceKindClusterProfile = "clusterprofile"
)

// SourceKinds lists every source kind, in the order the CRD documents them.
var SourceKinds = []string{SourceKindRancher, SourceKindStatic, SourceKindEKS, SourceKindGKE, SourceKindOCM, SourceKindAKS, SourceKindClusterProfile}

// DefaultStaticConfigMap is the ConfigMap a static source reads when the rule names none
// (spec.source.static.configMap).
const DefaultStaticConfigMap = "enforcement-static-clusters"

// Identity filter keys that are not the user's own filters: a static source's ConfigMap other
// than the default, an eks source's regions and a gke source's projects.
const (
	SourceFilterConfigMap = "configMap"
	SourceFilterRegions   = "regions"
	SourceFilterProjects  = "projects"
	// SourceFilterSubscriptions and SourceFilterResourceGroups are an aks source's
	// subscriptions and resource groups.
	SourceFilterSubscriptions  = "subscriptions"
	SourceFilterResourceGroups = "resourceGroups"
	// SourceFilterExpression is a gke source's gcloud filter expression (spec.source.gke.filter);
	// no field filter may use the key.
	SourceFilterExpression = "filter"
	// SourceFilterNamespaces are a clusterprofile source's namespaces.
	SourceFilterNamespaces = "namespaces"
)

// SourceID is the stable identity of one cluster source: the same (kind, Secret, filters) gives
// the same id in every service, so a ClusterRule finds the clusters the scanner listed for it.
// It is the first 16 hex digits of the SHA-256 of
//
//	kind \x00 secretNamespace \x00 secretName \x00 (k=v \x00 for each filter, sorted by key)
//
// Inventories and event subjects are keyed by it, so the algorithm must never change. A NUL
// byte cannot occur in Kubernetes names or sensible filter values, so the separators keep
// ("a", "bc") and ("ab", "c") apart.
func SourceID(kind, secretNamespace, secretName string, filters map[string]string) string {
	h := sha256.New()
	for _, s := range []string{kind, secretNamespace, secretName} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	for _, k := range slices.Sorted(maps.Keys(filters)) {
		h.Write([]byte(k + "=" + filters[k]))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// NewSourceRef returns the reference of the source (kind, Secret, filters): secretName defaults
// to the kind, and ID is SourceID over the result. filters are the identity filters of the kind
// (RancherSourceFilters, StaticSourceFilters, EKSSourceFilters, GKESourceFilters; none for ocm).
func NewSourceRef(kind, secretNamespace, secretName string, filters map[string]string) SourceRef {
	if secretName == "" {
		secretName = kind
	}
	return SourceRef{
		Kind:            kind,
		ID:              SourceID(kind, secretNamespace, secretName, filters),
		SecretNamespace: secretNamespace,
		SecretName:      secretName,
	}
}

// RancherSourceFilters is the identity part of a rancher source: its filters (the query
// parameters of /v3/clusters) as they are; nil when there are none.
func RancherSourceFilters(filters map[string]string) map[string]string {
	if len(filters) == 0 {
		return nil
	}
	return maps.Clone(filters)
}

// StaticSourceFilters is the identity part of a static source: none for the default ConfigMap
// (named or left empty), so that it keeps the id of a filterless source, and
// {"configMap": <name>} for any other, so two ConfigMaps are two sources.
func StaticSourceFilters(configMap string) map[string]string {
	if configMap == "" || configMap == DefaultStaticConfigMap {
		return nil
	}
	return map[string]string{SourceFilterConfigMap: configMap}
}

// EKSSourceFilters is the identity part of an eks source: {"regions": "eu-west-1,us-east-1"}
// (see NormaliseSourceList); nil without regions. Two rules listing different regions with one
// Secret are two sources.
func EKSSourceFilters(regions []string) map[string]string {
	rs := NormaliseSourceList(regions)
	if len(rs) == 0 {
		return nil
	}
	return map[string]string{SourceFilterRegions: strings.Join(rs, ",")}
}

// GKESourceFilters is the identity part of a gke source: its field filters plus
// {"projects": "a,b"} (see NormaliseSourceList; "projects" is a key no filter may use); nil
// when both are empty. Tags and ignore are selection inside the source, not part of it.
func GKESourceFilters(projects []string, filters map[string]string) map[string]string {
	out := maps.Clone(filters)
	if ps := NormaliseSourceList(projects); len(ps) > 0 {
		if out == nil {
			out = map[string]string{}
		}
		out[SourceFilterProjects] = strings.Join(ps, ",")
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// AKSSourceFilters is the identity part of an aks source: {"subscriptions": "a,b"} and, when
// the source names resource groups, {"resourceGroups": "rg-a,rg-b"} (see NormaliseSourceList;
// both lower-cased first, since Azure compares subscription ids and resource group names without
// case); nil when
// both are empty. Two rules listing different subscriptions or resource groups with one Secret
// are two sources.
func AKSSourceFilters(subscriptions, resourceGroups []string) map[string]string {
	out := map[string]string{}
	if ss := NormaliseSourceList(lowerAll(subscriptions)); len(ss) > 0 {
		out[SourceFilterSubscriptions] = strings.Join(ss, ",")
	}
	if rgs := NormaliseSourceList(lowerAll(resourceGroups)); len(rgs) > 0 {
		out[SourceFilterResourceGroups] = strings.Join(rgs, ",")
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// lowerAll returns the strings lower-cased (a new slice).
func lowerAll(in []string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = strings.ToLower(s)
	}
	return out
}

// ClusterProfileSourceFilters is the identity part of a clusterprofile source:
// {"namespaces": "a,b"} (see NormaliseSourceList); nil for every namespace. The label selector,
// properties and ignore are selection inside the source, not part of it.
func ClusterProfileSourceFilters(namespaces []string) map[string]string {
	ns := NormaliseSourceList(namespaces)
	if len(ns) == 0 {
		return nil
	}
	return map[string]string{SourceFilterNamespaces: strings.Join(ns, ",")}
}

// NormaliseSourceList trims, sorts and de-duplicates a list of regions or projects, dropping
// empty entries, so that two spellings of one list are one source.
func NormaliseSourceList(in []string) []string {
	var out []string
	for _, s := range in {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
