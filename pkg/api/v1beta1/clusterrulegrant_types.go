package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func init() { schemeBuilder.Register(&ClusterRuleGrant{}, &ClusterRuleGrantList{}) }

// ClusterRuleGrant lets the ClusterRules of other namespaces act, and says what they may use.
// It follows Argo CD's AppProject: an Application outside Argo CD's own namespace is allowed only
// where an AppProject lists its namespace in sourceNamespaces, and that project limits its
// repositories, destinations and cluster-scoped kinds. Here a rule outside OPERATOR_NAMESPACE acts
// only where a grant lists its namespace, and only within the grant's sources, clusters,
// repositories, destination namespaces, cluster-scoped kinds and webhook endpoints. Only grants in
// OPERATOR_NAMESPACE count: whoever may write there is the operator. Rules in OPERATOR_NAMESPACE
// need no grant.
//
// The grant is enforced twice: rule-engine issues no intent outside it, and the Applications of
// a granted rule live in an AppProject per grant and cluster whose source repositories,
// destinations and cluster-resource whitelist are the grant's, so Argo CD itself refuses what
// lies outside, whatever Enforcement sends.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=crg,categories=enforcement
// +kubebuilder:printcolumn:name="Namespaces",type=string,JSONPath=`.spec.sourceNamespaces`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterRuleGrant struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ClusterRuleGrantSpec `json:"spec"`
}

// ClusterRuleGrantList is a list of ClusterRuleGrants.
//
// +kubebuilder:object:root=true
type ClusterRuleGrantList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterRuleGrant `json:"items"`
}

// ClusterRuleGrantSpec is what the rules of the covered namespaces may use. Every list is an
// allow list: what it does not match is refused. Patterns are globs as Argo CD's AppProject
// takes them ("*" matches any run of characters, "/" included; "?" one character; "[...]" a
// class; "{a,b}" alternatives).
type ClusterRuleGrantSpec struct {
	// SourceNamespaces are the namespaces (patterns) whose ClusterRules the grant covers.
	// OPERATOR_NAMESPACE itself needs no grant.
	// +kubebuilder:validation:MinItems=1
	SourceNamespaces []string `json:"sourceNamespaces"`

	// Sources are the cluster sources, and their Secrets in OPERATOR_NAMESPACE, the rules may read.
	// +kubebuilder:validation:MinItems=1
	Sources []GrantSource `json:"sources"`

	// ClusterSelector narrows the clusters of those sources the rules may select, by the
	// clusters' labels (as the scanner publishes them). Absent: every cluster of the sources.
	// A rule's own selection applies within it; clusters outside it are never selected, never
	// listed in the rule's status, and get nothing.
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`

	// SourceRepos are the repository URLs (patterns) the rules' enforcements may install from.
	// They become the source repositories of the grant's AppProjects.
	// +kubebuilder:validation:MinItems=1
	SourceRepos []string `json:"sourceRepos"`

	// DestinationNamespaces are the namespaces (patterns) on the clusters the enforcements may
	// install into. They become the destinations of the grant's AppProjects, on their cluster only.
	// +kubebuilder:validation:MinItems=1
	DestinationNamespaces []string `json:"destinationNamespaces"`

	// ClusterResourceWhitelist lists the cluster-scoped kinds the enforcements may create
	// (group and kind patterns, as in an AppProject). Absent or empty: none (Argo CD refuses every
	// cluster-scoped resource of a project without a whitelist).
	// +optional
	ClusterResourceWhitelist []metav1.GroupKind `json:"clusterResourceWhitelist,omitempty"`

	// WebhookEndpoints are the URLs (patterns, matched against the whole endpoint) the rules'
	// beforeInstall and afterInstall triggers may call. Absent or empty: no triggers.
	// +optional
	WebhookEndpoints []string `json:"webhookEndpoints,omitempty"`
}

// GrantSource is one cluster source a grant allows.
type GrantSource struct {
	// Kind of the source.
	// +kubebuilder:validation:Enum=rancher;static;eks;gke;ocm;aks;clusterprofile
	Kind string `json:"kind"`
	// SecretNames are the names (patterns) of the source Secrets in OPERATOR_NAMESPACE a rule may
	// name in spec.source.secretName. Absent or empty: only the kind's default Secret (a Secret
	// named after the kind, which is what a rule without secretName reads).
	// +optional
	SecretNames []string `json:"secretNames,omitempty"`
}
