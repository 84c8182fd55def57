package events

// The rule engine's request-reply API, a NATS micro service: the operator's command line asks it
// what a rule would do (`enforcement preview`), which rules match a cluster now, and why the
// others do not (`enforcement explain cluster`), and which clusters a rule matches now, and why
// not the others (`enforcement explain rule`). Nothing here is an event: its subjects begin
// with APISubjectRoot, outside the ENFORCEMENT stream's SubjectRoot + ".>", so requests and
// replies are never stored.

const (
	// APISubjectRoot is the first token of every request-reply subject.
	APISubjectRoot = "enforcement-api"
	// RuleEngineAPIName is the rule engine's micro service name (`nats micro ls` lists it).
	RuleEngineAPIName = "rule-engine"
	// PreviewSubject answers a PreviewRequest with a PreviewResult, or a micro error (code
	// "400": the rule cannot be previewed, the description says why; "500": the engine could
	// not read its state).
	PreviewSubject = APISubjectRoot + ".rule-engine.preview"
	// ExplainClusterSubject answers an ExplainClusterRequest with an ExplainClusterResult, or a
	// micro error (code "400": the request is malformed; "500": the engine could not read its
	// state or the rules).
	ExplainClusterSubject = APISubjectRoot + ".rule-engine.explain-cluster"
	// ExplainRuleSubject answers an ExplainRuleRequest with an ExplainRuleResult, or a micro
	// error (code "404": no ClusterRule of that namespace and name on the API server; "400": the
	// request is malformed or names a namespace the engine does not watch; "500": the engine
	// could not read its state or the rule).
	ExplainRuleSubject = APISubjectRoot + ".rule-engine.explain-rule"
)

// ExplainRuleRequest asks which clusters of its source a live ClusterRule matches now, and why
// not the others.
type ExplainRuleRequest struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// ExplainRuleResult is the rule engine's verdict on the live rule for every cluster of its
// source: the preview's answer for the rule as it is (PreviewResult's Clusters, Held and
// TemplateErrors), except that it names no cluster a rule outside OPERATOR_NAMESPACE may not
// target, as the rule's status names none: those are counted in Withheld.
type ExplainRuleResult struct {
	// Rule is the live rule: its uid and generation.
	Rule   RuleRef   `json:"rule"`
	Source SourceRef `json:"source"`
	// Inactive says why the rule selects no cluster at all, whatever its source lists: it is
	// being deleted, or its spec is invalid (it keeps what it has). Clusters is empty then.
	Inactive string `json:"inactive,omitempty"`
	// Clusters are the clusters of the rule's source the answer may name, by name: matching or
	// not and why (as PreviewCluster).
	Clusters []PreviewCluster `json:"clusters"`
	// Withheld counts, by reason, the clusters of the source a rule outside OPERATOR_NAMESPACE
	// may not target (no ClusterRuleGrant permits the rule, or outside its grant's cluster
	// selector); they are not named.
	Withheld []WithheldClusters `json:"withheld,omitempty"`
	// Held is the hold the rule edit breaker has on the rule's removals, if any (its Clusters
	// are empty for a rule outside OPERATOR_NAMESPACE, whose Message names none either).
	Held *PreviewHeld `json:"held,omitempty"`
	// TemplateErrors are the selected clusters whose render fails: they keep what they have.
	TemplateErrors []PreviewTemplateError `json:"templateErrors,omitempty"`
	// Rollout is where the rule's staged rollout (spec.rollout) stands; nil without one.
	Rollout *RolloutView `json:"rollout,omitempty"`
}

// RolloutView is a rule's staged rollout as previews and explanations show it: for a live rule
// where it stands, for a previewed edit the rollout the edit would start.
type RolloutView struct {
	// Generation is the generation rolled out; StableGeneration the one the clusters not
	// reached run (0: none, they keep what they have).
	Generation       int64 `json:"generation"`
	StableGeneration int64 `json:"stableGeneration,omitempty"`
	// Phase is Progressing, Baking, AwaitingApproval, Halted or Complete; Step the current
	// step's name; Message what the rollout waits for or what halted it.
	Phase   string            `json:"phase"`
	Step    string            `json:"step,omitempty"`
	Message string            `json:"message,omitempty"`
	Steps   []RolloutStepView `json:"steps"`
}

// RolloutStepView is one step of a rollout: the clusters it reaches (its own, by name) and how
// far they are.
type RolloutStepView struct {
	Name            string   `json:"name"`
	Phase           string   `json:"phase"`
	Clusters        []string `json:"clusters"`
	Updated         int      `json:"updated"`
	Healthy         int      `json:"healthy"`
	RequireApproval bool     `json:"requireApproval,omitempty"`
	BakeSeconds     int64    `json:"bakeSeconds,omitempty"`
}

// WithheldClusters is how many clusters of a rule's source the rule does not match for one
// reason, unnamed.
type WithheldClusters struct {
	Reason string `json:"reason"`
	Count  int    `json:"count"`
}

// ExplainClusterRequest asks which ClusterRules match a cluster now, and why the others do not.
type ExplainClusterRequest struct {
	// Cluster is the cluster's name, as sources list it and Argo CD registers it.
	Cluster string `json:"cluster"`
}

// ExplainClusterResult is the rule engine's verdict, from its own cluster view and selection
// code, on every live ClusterRule it watches for each cluster of the requested name.
type ExplainClusterResult struct {
	// Cluster is the requested name.
	Cluster string `json:"cluster"`
	// Clusters are the clusters of that name in the engine's view, one per source that lists it
	// (and per identity), ordered by source id; empty when no source lists the name.
	Clusters []ExplainedCluster `json:"clusters"`
}

// ExplainedCluster is one cluster of the requested name as its source lists it, with the verdict
// of every rule on it.
type ExplainedCluster struct {
	Source   SourceRef         `json:"source"`
	Identity string            `json:"identity,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	State    string            `json:"state,omitempty"`
	// Eligible reports whether the cluster may receive new installs.
	Eligible bool `json:"eligible"`
	// Rules are the verdicts of the live ClusterRules, by namespace and name.
	Rules []RuleVerdict `json:"rules"`
}

// RuleVerdict is whether one rule gives its enforcements to the cluster now, and why not.
type RuleVerdict struct {
	Rule RuleRef `json:"rule"`
	// Matches: the rule selects the cluster, which is eligible, and its render for the cluster
	// succeeds, so the cluster gets Installs.
	Matches bool `json:"matches"`
	// Installs are the names of the enforcements the rule renders for the cluster (set when
	// Matches).
	Installs []string `json:"installs,omitempty"`
	// Reason says why not when Matches is false: the rule reads another source, is invalid,
	// being deleted or NotPermitted, does not select the cluster (the first selection test that
	// fails), the cluster is not eligible, or the render fails for it.
	Reason string `json:"reason,omitempty"`
	// Installed are the enforcements the rule's install records hold for the cluster now: a
	// rule that no longer matches may keep them (not eligible, invalid rule, removal held).
	Installed []string `json:"installed,omitempty"`
}

// PreviewRequest asks what applying a ClusterRule would do.
type PreviewRequest struct {
	// Rule is the ClusterRule manifest, YAML or JSON, as `kubectl apply -f` would take it.
	Rule string `json:"rule"`
}

// Preview actions of an Application.
const (
	PreviewCreate = "create"
	PreviewUpdate = "update"
	PreviewDelete = "delete"
)

// PreviewResult is what applying a rule would do, computed by the rule engine's own decision
// code against its cluster view and install records, writing nothing.
type PreviewResult struct {
	// Rule is the rule as it would be: its uid (empty for a new rule) and the generation the
	// edit would give it.
	Rule RuleRef `json:"rule"`
	// Existing is whether a rule of this name exists; LiveGeneration is its generation then.
	Existing       bool      `json:"existing"`
	LiveGeneration int64     `json:"liveGeneration,omitempty"`
	Source         SourceRef `json:"source"`
	// Clusters are the clusters the rule's source lists in the engine's view, by name, except
	// those a rule outside OPERATOR_NAMESPACE may not target, which are counted in Withheld.
	Clusters []PreviewCluster `json:"clusters"`
	// Withheld counts, by reason, the clusters of the source a rule outside OPERATOR_NAMESPACE
	// may not target (no ClusterRuleGrant permits the rule, or outside its grant's cluster
	// selector); they are not named, as the rule's status names none.
	Withheld []WithheldClusters `json:"withheld,omitempty"`
	// Changes are the Application changes the rule would make now, by cluster and enforcement,
	// held ones included (Held set).
	Changes []PreviewChange `json:"changes"`
	// Unchanged counts the Applications the rule has that no change touches (held ones are
	// counted among Changes).
	Unchanged int `json:"unchanged"`
	// Held is set when the blast-radius guard (the rule edit breaker) would hold the edit's
	// removals.
	Held *PreviewHeld `json:"held,omitempty"`
	// TemplateErrors are the clusters whose render fails: they keep what they have.
	TemplateErrors []PreviewTemplateError `json:"templateErrors,omitempty"`
	// Rollout is the staged rollout the edit would start (spec.rollout); nil without one. The
	// Changes it makes later, step by step, are marked Staged.
	Rollout *RolloutView `json:"rollout,omitempty"`
}

// PreviewCluster is one cluster of the rule's source and whether the rule would select it.
type PreviewCluster struct {
	Name string `json:"name"`
	// Matches: selected and eligible, so it gets the rule's enforcements.
	Matches bool `json:"matches"`
	// Reason says why not when Matches is false (not selected, or not eligible).
	Reason string `json:"reason,omitempty"`
	// Step is the rollout step that reaches the cluster, for a rule with spec.rollout (empty
	// when the cluster waits for the rollout's end: no step selects it).
	Step string `json:"step,omitempty"`
	// Generation is the rule generation whose spec the cluster runs (an explanation of a live
	// rule with a rollout); 0 when unknown or none.
	Generation int64 `json:"generation,omitempty"`
}

// PreviewChange is one Application the rule would create, update or delete.
type PreviewChange struct {
	Action      string `json:"action"`
	Cluster     string `json:"cluster"`
	Enforcement string `json:"enforcement"`
	Application string `json:"application"`
	// Reason and DeletionPolicy are those of a delete's uninstall intent.
	Reason         string `json:"reason,omitempty"`
	DeletionPolicy string `json:"deletionPolicy,omitempty"`
	// Held is set on a delete the blast-radius guard would hold: it would not happen yet.
	Held bool `json:"held,omitempty"`
	// Before is the rendered spec the Application has (nil: unknown, or a create), After the
	// one it would get (nil for a delete); Diff is the line diff between them.
	Before *Enforcement `json:"before,omitempty"`
	After  *Enforcement `json:"after,omitempty"`
	Diff   string       `json:"diff,omitempty"`
	// BeforeUnknown says the previous spec could not be read (its render is no longer cached).
	BeforeUnknown bool `json:"beforeUnknown,omitempty"`
	// Step is the rollout step that makes the change, for a rule with spec.rollout; Staged
	// says it is not made now but when the rollout reaches that step (after the earlier
	// steps' health, bake times and approvals).
	Step   string `json:"step,omitempty"`
	Staged bool   `json:"staged,omitempty"`
}

// PreviewHeld is the hold the rule edit breaker would place on the edit's removals.
type PreviewHeld struct {
	Generation int64    `json:"generation"`
	Installed  int      `json:"installed"`
	Cap        int      `json:"cap"`
	Clusters   []string `json:"clusters"`
	Message    string   `json:"message"`
}

// PreviewTemplateError is a cluster whose render of the rule fails.
type PreviewTemplateError struct {
	Cluster string `json:"cluster"`
	Message string `json:"message"`
}
