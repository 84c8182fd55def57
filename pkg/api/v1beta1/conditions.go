package v1beta1

// ConditionReady is the one condition type of a ClusterRule: True when every selected cluster
// has its enforcements installed and nothing blocks the rule.
const ConditionReady = "Ready"

// Reasons of the Ready condition, CamelCase as Kubernetes conventions want. rule-engine picks
// the most important one that applies, in this order.
const (
	ReasonInvalidSpec = "InvalidSpec" // False: the rule cannot be used as written
	// False: a rule outside OPERATOR_NAMESPACE has no ClusterRuleGrant that allows what it asks
	// for (its source, Secret, repositories, namespaces or trigger endpoints); it selects no
	// cluster and gets no install.
	ReasonNotPermitted  = "NotPermitted"
	ReasonTemplateError = "TemplateError" // False: a template failed to render for some cluster
	ReasonRemovalsHeld  = "RemovalsHeld"  // False: the removal breaker holds removals; an operator must release them
	// False: the rule's source changed and the new source has not listed completely yet (or is
	// degraded); the clusters of the old source keep what they have until it has.
	ReasonSourceHandover = "SourceHandover"
	ReasonSourceDegraded = "SourceDegraded" // False: the last scan of the source was not complete
	// False: a staged rollout (spec.rollout) halted on a Degraded or failed-sync Application;
	// an edit of the rule starts a new rollout (a rollback is an edit back).
	ReasonRolloutHalted = "RolloutHalted"
	// False: a staged rollout waits for an approval of its next step.
	ReasonRolloutAwaitingApproval = "RolloutAwaitingApproval"
	ReasonTriggerBlocked          = "TriggerBlocked" // False: a failurePolicy=Fail trigger holds installs
	// False: an install was refused because another cluster (another provider identity) with the
	// same name owns its Argo CD objects; a person must rename one cluster or drop it from the rule.
	ReasonNameConflict  = "NameConflict"
	ReasonInstallFailed = "InstallFailed" // False: some installs failed
	// False: an afterInstall trigger with failurePolicy=Fail failed; the Applications exist.
	ReasonAfterInstallFailed = "AfterInstallFailed"
	ReasonProgressing        = "Progressing" // False: installs issued, not all confirmed yet
	// False: a staged rollout is under way; the status's rollout says where it stands.
	ReasonRollingOut = "RollingOut"
	ReasonNoClusters = "NoClusters" // True: nothing matches (yet)
	ReasonInstalled  = "Installed"  // True: every selected cluster has its enforcements
)
