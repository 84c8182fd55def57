package v1beta1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion is the API group and version of ClusterRule.
var GroupVersion = schema.GroupVersion{Group: "enforcement.globo.com", Version: "v1beta1"}

var schemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

// AddToScheme registers ClusterRule and ClusterRuleList with a scheme.
var AddToScheme = schemeBuilder.AddToScheme

func init() { schemeBuilder.Register(&ClusterRule{}, &ClusterRuleList{}) }

// ClusterRule selects clusters from one source and names the packages (enforcements) every
// selected cluster gets through Argo CD.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cr;crule,categories=enforcement
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Clusters",type=integer,JSONPath=`.status.matchedClusters`
// +kubebuilder:printcolumn:name="Installed",type=integer,JSONPath=`.status.installedApplications`
// +kubebuilder:printcolumn:name="Errors",type=integer,JSONPath=`.status.installErrorCount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterRuleSpec   `json:"spec"`
	Status ClusterRuleStatus `json:"status,omitempty"`
}

// ClusterRuleList is a list of ClusterRules.
//
// +kubebuilder:object:root=true
type ClusterRuleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterRule `json:"items"`
}

// ClusterRuleSpec is what the rule wants.
type ClusterRuleSpec struct {
	// Enforcements are the packages installed on every selected cluster. Every field may use the
	// original's Jinja templates: ${{ expr }} and ${% stmt %}.
	// +kubebuilder:validation:MinItems=1
	Enforcements []Enforcement `json:"enforcements"`

	// Source says where the clusters come from and which of them the rule selects.
	Source Source `json:"source"`

	// Triggers are webhooks called before and after an Application is created.
	// +optional
	Triggers *Triggers `json:"triggers,omitempty"`

	// DeletionPolicy says what happens to a cluster's workloads when the rule lets go of an
	// Application: Orphan (default, as the original) deletes the Application and keeps the
	// resources; Cascade deletes them too. A cluster that is gone is always orphaned.
	// +kubebuilder:validation:Enum=Orphan;Cascade
	// +kubebuilder:default=Orphan
	// +optional
	DeletionPolicy string `json:"deletionPolicy,omitempty"`

	// Rollout (extension) stages a change of the rule: its new generation reaches the clusters
	// step by step, each step's Applications must report Healthy and Synced for the step's bake
	// time before the next step starts, and a Degraded or failed-sync Application halts it.
	// Absent: a change reaches every selected cluster at once, as in the original.
	// +optional
	Rollout *Rollout `json:"rollout,omitempty"`
}

// Rollout is a rule's staged rollout: ordered steps, each reaching more of the rule's clusters.
// Steps are cumulative (step 2 reaches what step 1 reached and its own clusters); the clusters no
// step selects get the new generation when the last step completes.
type Rollout struct {
	// Steps, in the order they run.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	// +listType=atomic
	Steps []RolloutStep `json:"steps"`
	// MaxUnavailable bounds how many of a step's clusters are being updated at once: updated to
	// the new generation and not yet Healthy and Synced. A number, or a percentage of the
	// step's clusters ("25%", rounded down, at least 1). Default: all of the step's clusters.
	// +kubebuilder:validation:XIntOrString
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// RolloutStep is one step: the clusters it reaches, chosen by labels or by a percentage of the
// rule's selected clusters, its bake time and whether it waits for an approval.
//
// +kubebuilder:validation:XValidation:rule="has(self.percentage) != (has(self.matchLabels) || has(self.matchExpressions))",message="a step selects its clusters by labels (matchLabels, matchExpressions) or by percentage: one of the two"
type RolloutStep struct {
	// Name of the step, shown in the status and named by an approval. Default: step-<n>, n
	// counting from 1.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Name string `json:"name,omitempty"`
	// MatchLabels selects the step's clusters: those whose labels include all of these.
	// +optional
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
	// MatchExpressions selects the step's clusters by label expressions (In, NotIn, Exists,
	// DoesNotExist), as a Kubernetes label selector does.
	// +optional
	// +listType=atomic
	MatchExpressions []metav1.LabelSelectorRequirement `json:"matchExpressions,omitempty"`
	// Percentage of the rule's selected clusters this step has reached when it completes,
	// counting the earlier steps' (10, then 50, then 100). Clusters are taken in an order fixed
	// by the rule and the cluster's name, so the same clusters come first in every rollout.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	Percentage *int32 `json:"percentage,omitempty"`
	// BakeTime is how long every Application of the step must stay Healthy and Synced (as Argo
	// CD's application controller reports them) before the next step starts, e.g. "10m".
	// Default: the next step starts as soon as they all are.
	// +optional
	BakeTime *metav1.Duration `json:"bakeTime,omitempty"`
	// RequireApproval makes the step wait, before it updates any cluster, for an approval: the
	// rule's annotation enforcement.globo.com/approve-rollout=generation/<n>/step/<name>, or
	// `enforcement approve <namespace>/<rule>`.
	// +optional
	RequireApproval bool `json:"requireApproval,omitempty"`
}

// Enforcement is one package: an Argo CD Application source.
type Enforcement struct {
	// Name of the package; the Application is named <cluster>-<name>.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Repo is the Git (or Helm) repository URL.
	// +kubebuilder:validation:MinLength=1
	Repo string `json:"repo"`
	// Path inside the repository.
	// +optional
	Path string `json:"path,omitempty"`
	// Namespace the package is installed into on the cluster.
	// +kubebuilder:default=default
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// TargetRevision (extension) is the Git revision; HEAD when empty.
	// +optional
	TargetRevision string `json:"targetRevision,omitempty"`
	// Helm holds Helm parameters.
	// +optional
	Helm *Helm `json:"helm,omitempty"`
	// Labels are added to the Application.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
}

// Helm holds the Helm settings of an enforcement.
type Helm struct {
	// Parameters are Helm parameters; values may be numbers, booleans or (templated) strings.
	// +optional
	Parameters map[string]apiextensionsv1.JSON `json:"parameters,omitempty"`
}

// Source names one cluster source and the selection inside it. Exactly one of rancher, static,
// eks, gke, ocm, aks and clusterProfile is set.
//
// +kubebuilder:validation:XValidation:rule="[has(self.rancher), has(self.static), has(self.eks), has(self.gke), has(self.ocm), has(self.aks), has(self.clusterProfile)].filter(x, x).size() == 1",message="exactly one source kind (rancher, static, eks, gke, ocm, aks or clusterProfile) must be set"
type Source struct {
	// SecretName names the Secret with the source's credentials in the operator namespace.
	// Default: a Secret named after the source kind (e.g. "rancher").
	// +optional
	SecretName string `json:"secretName,omitempty"`

	// MatchLabels (extension) selects clusters whose labels include all of these.
	// +optional
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
	// MatchExpressions (extension) selects clusters by label expressions (In, NotIn, Exists,
	// DoesNotExist), as a Kubernetes label selector does.
	// +optional
	MatchExpressions []metav1.LabelSelectorRequirement `json:"matchExpressions,omitempty"`

	// +optional
	Rancher *RancherSource `json:"rancher,omitempty"`
	// +optional
	Static *StaticSource `json:"static,omitempty"`
	// +optional
	EKS *EKSSource `json:"eks,omitempty"`
	// +optional
	GKE *GKESource `json:"gke,omitempty"`
	// +optional
	OCM *OCMSource `json:"ocm,omitempty"`
	// +optional
	AKS            *AKSSource            `json:"aks,omitempty"`
	ClusterProfile *ClusterProfileSource `json:"clusterProfile,omitempty"`
}

// RancherSource selects clusters from Rancher's /v3/clusters.
type RancherSource struct {
	// Filters are passed to the Rancher API as query parameters.
	// +optional
	Filters map[string]string `json:"filters,omitempty"`
	// Labels select clusters whose labels include all of these.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Ignore lists cluster names that are never selected.
	// +optional
	Ignore []string `json:"ignore,omitempty"`
}

// StaticSource selects clusters listed in a ConfigMap in the operator namespace.
type StaticSource struct {
	// ConfigMap names the ConfigMap (key clusters.yaml); default "enforcement-static-clusters".
	// +optional
	ConfigMap string `json:"configMap,omitempty"`
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// +optional
	Ignore []string `json:"ignore,omitempty"`
}

// EKSSource selects Amazon EKS clusters.
type EKSSource struct {
	// +optional
	Regions []string `json:"regions,omitempty"`
	// Tags select clusters whose tags include all of these.
	// +optional
	Tags map[string]string `json:"tags,omitempty"`
	// +optional
	Ignore []string `json:"ignore,omitempty"`
}

// GKESource selects Google GKE clusters.
type GKESource struct {
	// +optional
	Projects []string `json:"projects,omitempty"`
	// Filters match fields of the cluster object in gcloud's dotted form, with glob patterns.
	// +optional
	Filters map[string]string `json:"filters,omitempty"`
	// Filter is a gcloud filter expression over the whole cluster object, as
	// `gcloud container clusters list --filter` takes it (`gcloud topic filters`), e.g.
	// "status=RUNNING AND resourceLabels.env:(prod staging)". It applies together with filters
	// (both must match). An invalid expression makes the rule InvalidSpec.
	// +optional
	Filter string `json:"filter,omitempty"`
	// Tags select clusters whose resourceLabels include all of these.
	// +optional
	Tags map[string]string `json:"tags,omitempty"`
	// +optional
	Ignore []string `json:"ignore,omitempty"`
}

// AKSSource selects Azure Kubernetes Service managed clusters.
type AKSSource struct {
	// Subscriptions are the Azure subscription ids to list; default the Secret's subscription_id.
	// +optional
	Subscriptions []string `json:"subscriptions,omitempty"`
	// ResourceGroups, when set, narrow the listing to these resource groups of every
	// subscription.
	// +optional
	ResourceGroups []string `json:"resourceGroups,omitempty"`
	// Tags select clusters whose Azure tags include all of these.
	// +optional
	Tags map[string]string `json:"tags,omitempty"`
	// +optional
	Ignore []string `json:"ignore,omitempty"`
}

// OCMSource selects Open Cluster Management ManagedClusters on the hub.
type OCMSource struct {
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Claims select clusters whose ClusterClaims have these exact values.
	// +optional
	Claims map[string]string `json:"claims,omitempty"`
	// +optional
	Ignore []string `json:"ignore,omitempty"`
}

// ClusterProfileSource selects the ClusterProfiles (multicluster.x-k8s.io/v1alpha1, the
// sig-multicluster Cluster Inventory API) on the hub: the scanner's own API server, or the one
// named by the `kubeconfig` key of the source Secret.
type ClusterProfileSource struct {
	// Namespaces to list (a ClusterProfile is namespaced; a namespace is typically one
	// clusterset). Empty: every namespace.
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`
	// Selector selects ClusterProfiles by their labels (e.g. x-k8s.io/cluster-manager).
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// Properties select ClusterProfiles whose status.properties have these exact values.
	// +optional
	Properties map[string]string `json:"properties,omitempty"`
	// +optional
	Ignore []string `json:"ignore,omitempty"`
}

// Triggers are the rule's webhooks.
type Triggers struct {
	// +optional
	BeforeInstall *Trigger `json:"beforeInstall,omitempty"`
	// +optional
	AfterInstall *Trigger `json:"afterInstall,omitempty"`
}

// Trigger is one webhook, POSTed when an Application is created.
type Trigger struct {
	// +kubebuilder:validation:MinLength=1
	Endpoint string `json:"endpoint"`
	// Timeout in seconds.
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=300
	// +optional
	Timeout int32 `json:"timeout,omitempty"`
	// FailurePolicy (extension): Ignore (default, as the original) installs whatever the webhook
	// answers; Fail holds the install until the webhook answers 2xx.
	// +kubebuilder:validation:Enum=Ignore;Fail
	// +kubebuilder:default=Ignore
	// +optional
	FailurePolicy string `json:"failurePolicy,omitempty"`
	// SigningSecret (extension) names a Secret in the rule's namespace whose key "key" signs
	// deliveries (Standard Webhooks).
	// +optional
	SigningSecret string `json:"signingSecret,omitempty"`
}

// ClusterRuleStatus is what rule-engine observed. Only rule-engine writes it.
type ClusterRuleStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, with the reasons listed in conditions.go.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// MatchedClusters counts the clusters the rule selects.
	// +optional
	MatchedClusters int32 `json:"matchedClusters,omitempty"`
	// InstalledApplications counts Applications reported installed.
	// +optional
	InstalledApplications int32 `json:"installedApplications,omitempty"`
	// InstallErrorCount counts (cluster, enforcement) pairs whose last install failed.
	// +optional
	InstallErrorCount int32 `json:"installErrorCount,omitempty"`
	// Clusters lists the selected clusters (at most MaxStatusEntries; see MatchedClusters).
	// +optional
	Clusters []ClusterStatus `json:"clusters,omitempty"`
	// InstallErrors lists failing (cluster, enforcement) pairs (at most MaxStatusEntries).
	// +optional
	InstallErrors []InstallError `json:"installErrors,omitempty"`
	// Rollout is the state of the rule's staged rollout; absent for a rule without spec.rollout.
	// +optional
	Rollout *RolloutStatus `json:"rollout,omitempty"`
}

// Phases of a rollout (RolloutStatus.Phase and RolloutStepStatus.Phase).
const (
	RolloutPending          = "Pending"          // a step not started yet
	RolloutProgressing      = "Progressing"      // the step's clusters are being updated
	RolloutBaking           = "Baking"           // every Application of the step is Healthy and Synced; the bake time runs
	RolloutAwaitingApproval = "AwaitingApproval" // the step waits for an approval before it starts
	RolloutHalted           = "Halted"           // an Application of the step is Degraded or its sync failed
	RolloutComplete         = "Complete"         // every cluster runs the generation
)

// RolloutStatus is where a rule's staged rollout stands.
type RolloutStatus struct {
	// Generation is the rule generation being rolled out (or rolled out, when Complete).
	Generation int64 `json:"generation"`
	// StableGeneration is the last generation that reached every cluster: the clusters the
	// rollout has not reached, and those that appear meanwhile, run it. 0: none yet (the
	// rule's first generation is rolling out; unreached clusters get nothing yet).
	// +optional
	StableGeneration int64 `json:"stableGeneration,omitempty"`
	// Phase is one of Progressing, Baking, AwaitingApproval, Halted, Complete.
	Phase string `json:"phase"`
	// Step is the current step's name (empty when Complete).
	// +optional
	Step string `json:"step,omitempty"`
	// Message says what the rollout waits for, or what halted it.
	// +optional
	Message string `json:"message,omitempty"`
	// Steps counts, per step, its clusters, how many run the generation, and how many of those
	// report every Application Healthy and Synced.
	// +optional
	Steps []RolloutStepStatus `json:"steps,omitempty"`
	// Generations says which clusters run which generation of the rule.
	// +optional
	Generations []GenerationClusters `json:"generations,omitempty"`
}

// RolloutStepStatus is one step of a rollout.
type RolloutStepStatus struct {
	Name string `json:"name"`
	// Phase is one of Pending, AwaitingApproval, Progressing, Baking, Halted, Complete.
	Phase string `json:"phase"`
	// Clusters the step reaches (its own, not the earlier steps').
	Clusters int32 `json:"clusters"`
	// Updated counts the step's clusters that run the generation.
	Updated int32 `json:"updated"`
	// Healthy counts the updated clusters whose Applications are all Healthy and Synced.
	Healthy int32 `json:"healthy"`
	// StartedAt is when the step started updating clusters; BakeStartedAt when its last
	// Application became Healthy and Synced (the bake time counts from there).
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	BakeStartedAt *metav1.Time `json:"bakeStartedAt,omitempty"`
}

// GenerationClusters names the clusters that run one generation of a rule.
type GenerationClusters struct {
	Generation int64 `json:"generation"`
	Count      int32 `json:"count"`
	// Clusters names them, the first MaxStatusEntries by name.
	// +optional
	Clusters []string `json:"clusters,omitempty"`
}

// MaxStatusEntries bounds the lists in the status so a rule over thousands of clusters stays small.
const MaxStatusEntries = 50

// ClusterStatus is one selected cluster.
type ClusterStatus struct {
	Name string `json:"name"`
	// +optional
	URL string `json:"url,omitempty"`
}

// InstallError is a failing (cluster, enforcement) pair.
type InstallError struct {
	Cluster     string `json:"cluster"`
	Enforcement string `json:"enforcement"`
	Reason      string `json:"reason"`
	Message     string `json:"message"`
	// Count is how many times it failed in a row.
	Count int32 `json:"count"`
}

// DeepCopyObject helpers are generated into zz_generated.deepcopy.go.
var _ runtime.Object = &ClusterRule{}
