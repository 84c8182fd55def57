package events

import (
	"errors"
	"fmt"
	"time"
)

// SourceRef identifies one cluster source as the scanner sees it: a kind plus the Secret and
// filters a ClusterRule gave it. Two rules with the same kind, Secret and filters share a source.
type SourceRef struct {
	// Kind is the source kind: "rancher", "static", "eks", "gke", "ocm" or "clusterprofile".
	Kind string `json:"kind"`
	// ID is a stable hash of (kind, Secret, filters), computed by the scanner. Required.
	ID string `json:"id"`
	// SecretNamespace and SecretName name the source's credentials Secret. Events carry the
	// reference only, never the Secret's data.
	SecretNamespace string `json:"secretNamespace,omitempty"`
	SecretName      string `json:"secretName,omitempty"`
}

// Cluster is what a source knows about one cluster. It never contains credentials.
type Cluster struct {
	Source SourceRef `json:"source"`
	// Key is the cluster's stable identity inside its source (Rancher id, EKS ARN, ...).
	Key string `json:"key"`
	// Identity is what identifies the cluster at its provider, whichever source Secret or filters
	// it is listed through: "rancher:<server URL>/<id>", "eks:<ARN>",
	// "gke:projects/<p>/locations/<l>/clusters/<n>", "ocm:<hub API server>/<ManagedCluster>"
	// ("ocm:in-cluster/<name>" when the hub's address is unknown),
	// "static:<ConfigMap namespace>/<ConfigMap name>/<entry>". Two clusters with the same Name
	// and different identities are different clusters. Empty from older producers.
	Identity string `json:"identity,omitempty"`
	// Name is the cluster's name, as Argo CD registers it and as templates see `name`.
	Name string `json:"name"`
	// URL is the API server URL Argo CD talks to (template variable `url`).
	URL string `json:"url"`
	// Labels are the cluster's labels in its source; rules select on them.
	Labels map[string]string `json:"labels,omitempty"`
	// State is the source's own lifecycle state ("active", "provisioning", "ACTIVE", ...).
	State string `json:"state,omitempty"`
	// Eligible reports whether the cluster may receive new installs (a healthy state). A present
	// but ineligible cluster keeps what it has.
	Eligible bool `json:"eligible"`
	// Attributes are the source's own fields of the cluster object, exposed to templates.
	Attributes map[string]any `json:"attributes,omitempty"`
}

func (c Cluster) validate() error {
	var errs []error
	if c.Source.Kind == "" || c.Source.ID == "" {
		errs = append(errs, errors.New("source.kind and source.id are required"))
	}
	if c.Key == "" || c.Name == "" {
		errs = append(errs, errors.New("cluster key and name are required"))
	}
	return errors.Join(errs...)
}

// ClusterAppeared says a source lists a cluster the inventory did not know.
type ClusterAppeared struct {
	Cluster Cluster `json:"cluster"`
	// Revision is the inventory revision of this cluster's record; it makes the id unique across
	// appeared → gone → appeared.
	Revision uint64 `json:"revision"`
}

// ClusterUpdated says a known cluster's labels, URL, state or attributes changed.
type ClusterUpdated struct {
	Cluster  Cluster `json:"cluster"`
	Revision uint64  `json:"revision"`
	// Changed names the fields that changed ("labels", "url", "state", "eligible", "attributes").
	Changed []string `json:"changed,omitempty"`
}

// ClusterGone says a cluster was absent from complete listings for the whole grace period.
type ClusterGone struct {
	Source   SourceRef `json:"source"`
	Key      string    `json:"key"`
	Name     string    `json:"name"`
	Revision uint64    `json:"revision"`
	// LastSeen is when a complete listing last contained the cluster.
	LastSeen time.Time `json:"lastSeen"`
}

// Reasons a source is degraded. The rule engine copies them into the affected rules' conditions.
const (
	DegradedListFailed    = "ListFailed"     // the source answered with an error or not at all
	DegradedUnauthorized  = "Unauthorized"   // the source refused the credentials
	DegradedPartial       = "PartialListing" // a page or region of the listing failed
	DegradedEmpty         = "EmptyListing"   // an empty listing from a source that had clusters
	DegradedSecretInvalid = "SecretInvalid"  // the source Secret is missing or malformed
	DegradedInvalidSpec   = "InvalidSpec"    // the rule's source filters cannot be used
	DegradedRemovalsHeld  = "RemovalsHeld"   // the removal breaker tripped; removals wait for release
)

// SourceDegraded says a scan of a source did not produce a complete, trustworthy listing, so no
// cluster was removed. Scan is the scanner's scan counter for that source.
type SourceDegraded struct {
	Source  SourceRef `json:"source"`
	Scan    uint64    `json:"scan"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	// Known is how many clusters the inventory holds for the source.
	Known int `json:"known"`
	// HeldRemovals names the clusters whose removal waits for an operator (reason RemovalsHeld).
	HeldRemovals []string `json:"heldRemovals,omitempty"`
}

// SourceRecovered says a source that was degraded produced a complete listing again, with no
// removals held: the SourceDegraded (or RemovalsHeld) condition of its rules ends now rather
// than when it would expire. source-scanner publishes it once per degraded spell, at the first
// such listing; DegradedSince, the spell's first degraded scan, makes its id, so a republish
// after a scanner restart is deduplicated.
type SourceRecovered struct {
	Source SourceRef `json:"source"`
	// Scan is the scan whose complete listing ended the degraded spell.
	Scan uint64 `json:"scan"`
	// DegradedSince is the first degraded scan of the spell.
	DegradedSince uint64 `json:"degradedSince"`
	// Known is how many clusters the inventory holds for the source after the scan.
	Known int `json:"known"`
}

// SourceListed says a source produced a complete listing, announced after that scan's cluster
// events were acknowledged by the stream: every cluster the listing holds has been published.
// source-scanner publishes it at the first complete listing of each source after it starts
// scanning it (a new source, or any source after a scanner restart), not at every scan.
// rule-engine waits for it before a rule whose source changed lets go of the old source's
// clusters (the source handover); Known tells it how many cluster events to have seen first,
// as they may be handled after this event.
type SourceListed struct {
	Source SourceRef `json:"source"`
	// Scan is the scan whose listing was complete.
	Scan uint64 `json:"scan"`
	// Known is how many clusters the inventory holds for the source after the scan.
	Known int `json:"known"`
}

// RemovalsReleased says an operator released the removals that one trip of a source's removal
// breaker holds: the clusters whose removal scan Trip held (the trip a RemovalsHeld
// SourceDegraded event names), and no others. `enforcement release-removals` publishes it;
// source-scanner records it and removes those clusters at the next complete scan if they are
// still missing. A release of a trip that holds nothing is dead-lettered.
type RemovalsReleased struct {
	Source SourceRef `json:"source"`
	// Trip is the scan number that held the removals.
	Trip uint64 `json:"trip"`
	// Clusters names the held clusters the operator saw when releasing (for audit).
	Clusters []string `json:"clusters,omitempty"`
	// By says who released them (the CLI's user and host), for audit.
	By string `json:"by,omitempty"`
}

// RuleRemovalsReleased says an operator released the selection removals that one generation of
// a rule held: rule-engine's rule edit breaker held the uninstalls of the clusters that
// generation (Rule.Generation) no longer selects, and this releases them, no others.
// `enforcement release-removals <namespace>/<name> generation/<n>` publishes it; rule-engine
// uninstalls those clusters if that generation is still the rule's and still holds them.
type RuleRemovalsReleased struct {
	// Rule is the rule, at the generation that held the removals.
	Rule RuleRef `json:"rule"`
	// Clusters names the held clusters the operator saw when releasing (for audit).
	Clusters []string `json:"clusters,omitempty"`
	// By says who released them (the CLI's user and host), for audit.
	By string `json:"by,omitempty"`
}

// RolloutApproved says an operator approved a step of a rule's staged rollout that requires
// approval (spec.rollout.steps[].requireApproval): the step named Step of the rollout of
// generation Rule.Generation, and no other. `enforcement approve <namespace>/<name>` publishes
// it; rule-engine records it and starts the step when the rollout reaches it. An approval of a
// generation that is no longer the rule's approves nothing (logged).
type RolloutApproved struct {
	// Rule is the rule, at the generation whose rollout is approved.
	Rule RuleRef `json:"rule"`
	// Step is the name of the approved step.
	Step string `json:"step"`
	// By says who approved it (the CLI's user and host), for audit.
	By string `json:"by,omitempty"`
}

// Phases of RolloutProgressed.
const (
	RolloutStepStarted      = "StepStarted"      // the step began updating its clusters
	RolloutAwaitingApproval = "AwaitingApproval" // the step waits for an approval
	RolloutBaking           = "Baking"           // the step's Applications are all Healthy and Synced; the bake time runs
	RolloutStepCompleted    = "StepCompleted"    // the step baked; the next one may start
	RolloutHalted           = "Halted"           // an Application of the step is Degraded or its sync failed
	RolloutCompleted        = "Completed"        // every cluster runs the generation
)

// RolloutProgressed says a rule's staged rollout moved. rule-engine publishes it; nothing
// consumes it (it is the rollout's audit trail in the stream).
type RolloutProgressed struct {
	// Rule is the rule at the generation being rolled out.
	Rule RuleRef `json:"rule"`
	// StableGeneration is the generation the clusters not reached yet run (0: none).
	StableGeneration int64 `json:"stableGeneration,omitempty"`
	// Step is the step's name; StepIndex counts from 0. Empty for Completed.
	Step      string `json:"step,omitempty"`
	StepIndex int    `json:"stepIndex"`
	// Phase is one of StepStarted, AwaitingApproval, Baking, StepCompleted, Halted, Completed.
	Phase string `json:"phase"`
	// Clusters names the step's clusters (StepStarted) or those that halted it (Halted).
	Clusters []string `json:"clusters,omitempty"`
	// Application, Health, Sync and Message name the Application that halted the rollout.
	Application string `json:"application,omitempty"`
	Message     string `json:"message,omitempty"`
}

// Argo CD's health and sync statuses, as its application controller writes them in an
// Application's status (health.status, sync.status, operationState.phase).
const (
	HealthHealthy     = "Healthy"
	HealthProgressing = "Progressing"
	HealthDegraded    = "Degraded"
	HealthSuspended   = "Suspended"
	HealthMissing     = "Missing"
	HealthUnknown     = "Unknown"
	SyncSynced        = "Synced"
	SyncOutOfSync     = "OutOfSync"
	OperationFailed   = "Failed"
	OperationError    = "Error"
)

// ApplicationHealth says what Argo CD's application controller reports for an Application
// argo-syncer owns: its health, its sync status and the phase of its last sync operation, for
// the spec hash the Application carries. argo-syncer publishes one whenever one of them (or the
// spec hash) changes; rule-engine's staged rollouts wait for Healthy and Synced and halt on
// Degraded or a failed sync.
type ApplicationHealth struct {
	Rule RuleRef `json:"rule"`
	// Cluster is the cluster's name; Identity its provider identity, when the Application
	// records one.
	Cluster  string `json:"cluster"`
	Identity string `json:"identity,omitempty"`
	// Enforcement is the rendered enforcement's name; Application the Application's name.
	Enforcement string `json:"enforcement"`
	Application string `json:"application"`
	// SpecHash is the spec hash of the install intent the Application was last written from.
	SpecHash string `json:"specHash"`
	// Observed says Argo CD's status describes the Application's current spec: the source and
	// destination Argo CD last compared (status.sync.comparedTo) are the spec's. Right after
	// an update the status still describes the previous spec, and Observed is false.
	Observed bool `json:"observed"`
	// ResourceVersion is the Application's, when the status was read.
	ResourceVersion string `json:"resourceVersion"`
	// Health is status.health.status; Sync status.sync.status; Operation
	// status.operationState.phase (empty when no sync ran).
	Health    string `json:"health,omitempty"`
	Sync      string `json:"sync,omitempty"`
	Operation string `json:"operation,omitempty"`
	// Message is the health message, or the failed operation's.
	Message string `json:"message,omitempty"`
}

// RuleRef identifies a ClusterRule at one generation.
type RuleRef struct {
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	UID        string `json:"uid,omitempty"`
	Generation int64  `json:"generation"`
}

func (r RuleRef) String() string { return r.Namespace + "/" + r.Name }

// Target is the cluster an intent is about.
type Target struct {
	Name   string    `json:"name"`
	Key    string    `json:"key"`
	URL    string    `json:"url"`
	Source SourceRef `json:"source"`
	// Identity is the cluster's Cluster.Identity: argo-syncer never lets two identities share a
	// cluster Secret, AppProject or Application. Empty from older producers.
	Identity string `json:"identity,omitempty"`
	// Replaces is set on the intents of a source handover when the cluster's identity changes
	// with its source (a renamed static ConfigMap): the identity of the cluster of the rule's old
	// source whose objects this target takes over, under the same cluster name. argo-syncer
	// moves objects recording exactly that identity to this one, in place, instead of answering
	// NameConflict.
	Replaces string `json:"replaces,omitempty"`
	// Revision is the cluster's inventory revision the intent was computed from.
	Revision uint64 `json:"revision"`
	// Gone is set on uninstall intents for a cluster its source no longer lists.
	Gone bool `json:"gone,omitempty"`
	// Registration carries the source's hints for the Argo CD cluster Secret: the cluster
	// attributes whose names start with "argocd." (EKS awsAuthConfig, GKE execProviderConfig,
	// the CA data). Never credentials: argo-syncer reads those from the source Secret itself.
	Registration map[string]string `json:"registration,omitempty"`
}

// HelmParameter is one rendered `helm.parameters` entry.
type HelmParameter struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Enforcement is one rendered package of a rule: every template already evaluated.
type Enforcement struct {
	Name           string            `json:"name"`
	Repo           string            `json:"repo"`
	Path           string            `json:"path"`
	Namespace      string            `json:"namespace"`
	TargetRevision string            `json:"targetRevision,omitempty"`
	HelmParameters []HelmParameter   `json:"helmParameters,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
}

// Trigger is one webhook of a rule (beforeInstall or afterInstall).
type Trigger struct {
	// Endpoint is the webhook URL as RedactURL shows it: never with its user information, query
	// values or fragment, which may hold a token.
	Endpoint string `json:"endpoint"`
	// EndpointRedacted says the rule's endpoint has credentials that Endpoint hides (user
	// information or a query): trigger-dispatcher reads the full endpoint from the rule when it
	// delivers, so that it is stored in no event, record or dead letter.
	EndpointRedacted bool `json:"endpointRedacted,omitempty"`
	TimeoutSeconds   int  `json:"timeoutSeconds"`
	// FailurePolicy is "Ignore" (default, as the original) or "Fail".
	FailurePolicy string `json:"failurePolicy,omitempty"`
	// SigningSecret names a Secret in the rule's namespace whose key signs deliveries.
	SigningSecret string `json:"signingSecret,omitempty"`
}

// Triggers are the webhooks of a rule.
type Triggers struct {
	BeforeInstall *Trigger `json:"beforeInstall,omitempty"`
	AfterInstall  *Trigger `json:"afterInstall,omitempty"`
}

// Deletion policies of a rule: what happens to an Application when its rule lets go of it.
const (
	DeletionOrphan  = "Orphan"  // delete the Application, keep the workload (the original's behaviour)
	DeletionCascade = "Cascade" // delete the Application and its resources on the cluster
)

// InstallIntent asks argo-syncer to make one (cluster, enforcement) Application exist as rendered.
type InstallIntent struct {
	Rule        RuleRef     `json:"rule"`
	Cluster     Target      `json:"cluster"`
	Enforcement Enforcement `json:"enforcement"`
	// SpecHash is a hash of the rendered enforcement; a changed spec is a new intent.
	SpecHash       string    `json:"specHash"`
	Triggers       *Triggers `json:"triggers,omitempty"`
	DeletionPolicy string    `json:"deletionPolicy,omitempty"`
	// Grant is set on the intents of a rule outside OPERATOR_NAMESPACE: the ClusterRuleGrant the
	// rule acts under, whose limits argo-syncer writes into the AppProject the Application lives
	// in (one per grant and cluster). Absent, as in the events of earlier versions: a rule of
	// OPERATOR_NAMESPACE, whose Application lives in the cluster's own AppProject.
	Grant *Grant `json:"grant,omitempty"`
	// ProjectRepos, on the intents of rules of OPERATOR_NAMESPACE, are the repositories of all
	// the install intents one decision sends to the same cluster (this one's among them), sorted,
	// when there are several: a new cluster's intents, one a rule. argo-syncer allows them all at
	// its first write of the cluster's AppProject, which is then written once instead of once a
	// rule. Absent, as in the events of earlier versions: the intent's own repository.
	ProjectRepos []string `json:"projectRepos,omitempty"`
}

// Grant is what an install intent carries of the ClusterRuleGrant its rule acts under: the
// limits Argo CD enforces through the AppProject. Patterns are Argo CD globs.
type Grant struct {
	// Name of the ClusterRuleGrant (in OPERATOR_NAMESPACE).
	Name string `json:"name"`
	// SourceRepos are the repository patterns the project allows.
	SourceRepos []string `json:"sourceRepos"`
	// DestinationNamespaces are the namespace patterns the project allows on its cluster.
	DestinationNamespaces []string `json:"destinationNamespaces"`
	// ClusterResources are the cluster-scoped kinds the project allows; none when empty.
	ClusterResources []GroupKind `json:"clusterResources,omitempty"`
}

// GroupKind is a Kubernetes API group and kind (patterns in a Grant).
type GroupKind struct {
	Group string `json:"group"`
	Kind  string `json:"kind"`
}

// Reasons for an uninstall intent.
const (
	UninstallNoLongerMatches    = "NoLongerMatches"
	UninstallClusterGone        = "ClusterGone"
	UninstallEnforcementRemoved = "EnforcementRemoved"
	UninstallRuleDeleted        = "RuleDeleted"
)

// UninstallIntent asks argo-syncer to remove one (cluster, enforcement) Application it owns.
type UninstallIntent struct {
	Rule    RuleRef `json:"rule"`
	Cluster Target  `json:"cluster"`
	// Enforcement is the rendered enforcement name the Application was installed under.
	Enforcement    string `json:"enforcement"`
	Reason         string `json:"reason"`
	DeletionPolicy string `json:"deletionPolicy,omitempty"`
}

// InstallSucceeded reports that an install intent's Application exists as rendered.
type InstallSucceeded struct {
	IntentID    string  `json:"intentId"`
	Rule        RuleRef `json:"rule"`
	Cluster     string  `json:"cluster"`
	Enforcement string  `json:"enforcement"`
	Application string  `json:"application"`
	// Created is true when the Application did not exist before (the afterInstall moment).
	Created  bool   `json:"created"`
	SpecHash string `json:"specHash"`
	// Restored names the resync round (its start, RFC 3339) that put the intent's objects back
	// after they drifted or were lost (an edit or deletion by hand, an outage longer than the
	// retries); empty for the intent's own outcome. A restore is never the afterInstall moment:
	// Created is false.
	Restored string `json:"restored,omitempty"`
	// IntentSequence is the install intent's stream sequence, as argo-syncer received it; zero
	// for a restore and in events of earlier versions.
	IntentSequence uint64 `json:"intentSequence,omitempty"`
	// Intent is the whole install intent, carried when Created is true and the intent has an
	// afterInstall trigger, so that trigger-dispatcher can deliver the webhook from this event
	// alone: after a failover or a restart, a redelivered intent can reach it after this event.
	// With IntentSequence set, its absence says the intent had no afterInstall trigger (the
	// dispatcher then reads no delivery record); they came in the same version.
	Intent *InstallIntent `json:"intent,omitempty"`
}

// InstallGated reports that argo-syncer holds an install intent back until its beforeInstall
// trigger has answered: the intent has a beforeInstall trigger and its Application does not
// exist. It carries the whole intent, so that trigger-dispatcher can deliver the webhook from
// this event alone. argo-syncer keeps the waiting intent itself and creates the Application on
// the trigger's outcome only if that intent is still the one waiting for the Application.
type InstallGated struct {
	IntentID string `json:"intentId"`
	// IntentSequence is the install intent's stream sequence, as argo-syncer received it.
	IntentSequence uint64 `json:"intentSequence,omitempty"`
	Application    string `json:"application"`
	// Intent is the install intent that waits; its triggers hold the beforeInstall webhook.
	Intent InstallIntent `json:"intent"`
}

// InstallFailed reports that an install intent could not be carried out.
type InstallFailed struct {
	IntentID    string  `json:"intentId"`
	Rule        RuleRef `json:"rule"`
	Cluster     string  `json:"cluster"`
	Enforcement string  `json:"enforcement"`
	Application string  `json:"application,omitempty"`
	Reason      string  `json:"reason"`
	Message     string  `json:"message"`
	// Permanent is true when retrying cannot help (the API server rejected the object).
	Permanent bool `json:"permanent"`
}

// UninstallDone reports that an uninstall intent was carried out.
type UninstallDone struct {
	IntentID    string  `json:"intentId"`
	Rule        RuleRef `json:"rule"`
	Cluster     string  `json:"cluster"`
	Enforcement string  `json:"enforcement"`
	Application string  `json:"application"`
	// Deleted is false when there was nothing (owned) to delete.
	Deleted bool `json:"deleted"`
	// Restored names the resync round (its start, RFC 3339) that carried out this uninstall
	// again because its Application was still there; empty for the intent's own outcome.
	Restored string `json:"restored,omitempty"`
}

// Trigger phases.
const (
	PhaseBeforeInstall = "beforeInstall"
	PhaseAfterInstall  = "afterInstall"
)

// TriggerDelivered reports that a webhook answered 2xx.
type TriggerDelivered struct {
	DeliveryID string `json:"deliveryId"`
	IntentID   string `json:"intentId"`
	// IntentSequence is the install intent's stream sequence, for the record (argo-syncer
	// matches trigger outcomes to the intent waiting for its Application by IntentID).
	IntentSequence uint64  `json:"intentSequence,omitempty"`
	Phase          string  `json:"phase"`
	Rule           RuleRef `json:"rule"`
	Cluster        string  `json:"cluster"`
	Enforcement    string  `json:"enforcement"`
	StatusCode     int     `json:"statusCode"`
	Attempts       int     `json:"attempts"`
}

// TriggerFailed reports that a webhook did not answer 2xx after all retries.
type TriggerFailed struct {
	DeliveryID     string  `json:"deliveryId"`
	IntentID       string  `json:"intentId"`
	IntentSequence uint64  `json:"intentSequence,omitempty"`
	Phase          string  `json:"phase"`
	Rule           RuleRef `json:"rule"`
	Cluster        string  `json:"cluster"`
	Enforcement    string  `json:"enforcement"`
	FailurePolicy  string  `json:"failurePolicy"`
	StatusCode     int     `json:"statusCode,omitempty"`
	Attempts       int     `json:"attempts"`
	Message        string  `json:"message"`
}

// TriggerAttempted reports one HTTP attempt of a webhook delivery, whatever came of it. Every
// attempt has one; the delivery's final outcome is still TriggerDelivered or TriggerFailed. It
// never carries the endpoint (its query or userinfo may hold a token), headers, the body or the
// signature.
type TriggerAttempted struct {
	DeliveryID     string  `json:"deliveryId"`
	IntentID       string  `json:"intentId"`
	IntentSequence uint64  `json:"intentSequence,omitempty"`
	Phase          string  `json:"phase"`
	Rule           RuleRef `json:"rule"`
	Cluster        string  `json:"cluster"`
	Enforcement    string  `json:"enforcement"`
	// Series names the run of attempts this one belongs to, so that a delivery attempted again
	// (after a restart, or by the retries of a blocked delivery) is recorded rather than
	// deduplicated: "event-<stream sequence>-<delivery count>" of the event whose handling made
	// the attempts, or "retry-<record revision>" for a retry of a blocked beforeInstall.
	Series string `json:"series"`
	// Attempt counts the delivery's attempts, the first being 1; the retries of a blocked
	// delivery continue the count its outcome event reported.
	Attempt int `json:"attempt"`
	// Result classifies the attempt: success (2xx), client_error (other 4xx), rate_limited (429),
	// server_error (5xx), redirect (3xx, not followed), timeout, connection, refused (the network
	// policy denied the address) or invalid (the endpoint is not an http(s) URL).
	Result string `json:"result"`
	// StatusCode is the HTTP status, when a response came.
	StatusCode int `json:"statusCode,omitempty"`
	// Error describes a failure without a response (timeout, connection, refused, invalid).
	Error string `json:"error,omitempty"`
	// DurationMillis is how long the attempt took, until the response was read or it failed.
	DurationMillis int64 `json:"durationMs"`
	// WillRetry says another attempt of this series follows, after RetryInMillis.
	WillRetry     bool  `json:"willRetry"`
	RetryInMillis int64 `json:"retryInMs,omitempty"`
}

// Compliance values, as the original policy-watcher wrote them.
const (
	Compliant    = "compliant"
	NonCompliant = "noncompliant"
	Empty        = "empty"
)

// ComplianceChanged says the folded OCM Policy compliance of a namespace took a new value.
type ComplianceChanged struct {
	Cluster   string `json:"cluster"`
	Namespace string `json:"namespace"`
	Claim     string `json:"claim"`
	Value     string `json:"value"`
	Previous  string `json:"previous,omitempty"`
	// Since is when the value began to hold (for compliant: after the stable duration).
	Since    time.Time `json:"since"`
	Policies int       `json:"policies"`
	// NonCompliantPolicies names the policies that are not Compliant (bounded by the publisher).
	NonCompliantPolicies []string `json:"nonCompliantPolicies,omitempty"`
}

// ClaimUpdated says the claim writer wrote a ClusterClaim.
type ClaimUpdated struct {
	Cluster      string `json:"cluster"`
	Claim        string `json:"claim"`
	Value        string `json:"value"`
	Previous     string `json:"previous,omitempty"`
	ComplianceID string `json:"complianceId"`
}

func required(what string, values ...string) error {
	for _, v := range values {
		if v == "" {
			return fmt.Errorf("%s: required field is empty", what)
		}
	}
	return nil
}
