// Package v1beta1 is the ClusterRule API (enforcement.globo.com/v1beta1), compatible with the
// original Python operator's manifests: every ClusterRule it accepted is accepted here and means
// the same. The extensions (matchLabels/matchExpressions, targetRevision, deletionPolicy, trigger
// failurePolicy and signing Secret, and the eks/gke/static/ocm sources) are optional.
//
// The CRD at deploy/k8s/enforcement-crds/crds/ is generated from these types by hack/generate.sh
// (controller-gen); a test keeps the two equal. pkg/api/crds embeds a copy of it for Go code
// (the rule engine's preview validates and defaults manifests with its schema).
//
// +kubebuilder:object:generate=true
// +groupName=enforcement.globo.com
package v1beta1
