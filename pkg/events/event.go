package events

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Event is one typed event of the contract. Every implementation is a struct of this package
// listed in the catalog below; the unexported method keeps the set closed.
type Event interface {
	// Type is the explicit, versioned CloudEvents type name, e.g. "io.enforcement.cluster.appeared.v1".
	Type() string
	// ID is the deterministic business key of the event, sent as ce-id and Nats-Msg-Id. Publishing
	// the same event twice inside the duplicate window stores it once.
	ID() string
	// OrderingKey groups events that must be handled in order (one cluster; one rule × cluster).
	OrderingKey() string
	// Validate reports a missing or malformed field. A consumer terminates an invalid event into a
	// dead letter instead of retrying it.
	Validate() error

	subjectKeys() []string
}

// descriptor is one catalog entry: how an event type is named, where it travels, what it means
// and which consumers receive it.
type descriptor struct {
	Type    string
	Subject []string // literal tokens and {parameters}, in order
	Summary string
	new     func() Event
	// Consumers receive the type (ConsumerRuleEngine, ...); nil when no service consumes it (it
	// is kept in the stream for audit). The consumers' filters, the AsyncAPI receive operations
	// and the handler tables' check all derive from this field: see routing.go.
	Consumers []string
}

// catalog lists every event of the contract. Type names, subjects and who receives each type are
// written out here, once.
var catalog = []descriptor{
	{"io.enforcement.cluster.appeared.v1", []string{SubjectRoot, "cluster", "appeared", "{sourceKind}", "{sourceId}", "{cluster}"},
		"A source lists a cluster the inventory did not know.", func() Event { return &ClusterAppeared{} }, []string{ConsumerRuleEngine}},
	{"io.enforcement.cluster.updated.v1", []string{SubjectRoot, "cluster", "updated", "{sourceKind}", "{sourceId}", "{cluster}"},
		"A known cluster's labels, URL, state or attributes changed.", func() Event { return &ClusterUpdated{} }, []string{ConsumerRuleEngine}},
	{"io.enforcement.cluster.gone.v1", []string{SubjectRoot, "cluster", "gone", "{sourceKind}", "{sourceId}", "{cluster}"},
		"A cluster was absent from complete listings for the whole grace period.", func() Event { return &ClusterGone{} }, []string{ConsumerRuleEngine}},
	{"io.enforcement.source.degraded.v1", []string{SubjectRoot, "source", "degraded", "{sourceKind}", "{sourceId}"},
		"A scan did not produce a complete listing (or removals are held); nothing was removed.", func() Event { return &SourceDegraded{} }, []string{ConsumerRuleEngine}},
	{"io.enforcement.source.recovered.v1", []string{SubjectRoot, "source", "recovered", "{sourceKind}", "{sourceId}"},
		"A degraded source listed completely again, with no removals held.", func() Event { return &SourceRecovered{} }, []string{ConsumerRuleEngine}},
	{"io.enforcement.source.listed.v1", []string{SubjectRoot, "source", "listed", "{sourceKind}", "{sourceId}"},
		"A source produced a complete listing, its cluster events already published (first complete scan of each source after the scanner starts it).", func() Event { return &SourceListed{} }, []string{ConsumerRuleEngine}},
	{"io.enforcement.removals.released.v1", []string{SubjectRoot, "removals", "released", "{sourceKind}", "{sourceId}"},
		"An operator released the removals one trip of a source's removal breaker holds.", func() Event { return &RemovalsReleased{} }, []string{ConsumerSourceScanner}},
	{"io.enforcement.rule.removals.released.v1", []string{SubjectRoot, "rule", "removals", "released", "{ruleNamespace}", "{rule}"},
		"An operator released the selection removals one generation of a rule held (rule-engine's rule edit breaker).", func() Event { return &RuleRemovalsReleased{} }, []string{ConsumerRuleEngine}},
	{"io.enforcement.rule.rollout.approved.v1", []string{SubjectRoot, "rule", "rollout", "approved", "{ruleNamespace}", "{rule}"},
		"An operator approved a step of a rule's staged rollout (spec.rollout) that requires approval.", func() Event { return &RolloutApproved{} }, []string{ConsumerRuleEngine}},
	{"io.enforcement.rule.rollout.progressed.v1", []string{SubjectRoot, "rule", "rollout", "progressed", "{ruleNamespace}", "{rule}"},
		"A rule's staged rollout moved: a step started, waits for approval, bakes, completed or halted; or the rollout completed.", func() Event { return &RolloutProgressed{} }, nil},
	{"io.enforcement.intent.install.v1", []string{SubjectRoot, "intent", "install", "{cluster}", "{ruleNamespace}", "{rule}"},
		"Make one (cluster, enforcement) Application exist as rendered.", func() Event { return &InstallIntent{} }, []string{ConsumerArgoSyncer, ConsumerTriggerDispatcher}},
	{"io.enforcement.intent.uninstall.v1", []string{SubjectRoot, "intent", "uninstall", "{cluster}", "{ruleNamespace}", "{rule}"},
		"Remove one (cluster, enforcement) Application Enforcement owns.", func() Event { return &UninstallIntent{} }, []string{ConsumerArgoSyncer}},
	{"io.enforcement.install.succeeded.v1", []string{SubjectRoot, "install", "succeeded", "{cluster}", "{ruleNamespace}", "{rule}"},
		"An install intent's Application exists as rendered.", func() Event { return &InstallSucceeded{} }, []string{ConsumerRuleEngine, ConsumerTriggerDispatcher}},
	{"io.enforcement.install.gated.v1", []string{SubjectRoot, "install", "gated", "{cluster}", "{ruleNamespace}", "{rule}"},
		"An install intent waits for its beforeInstall trigger before its Application is created.", func() Event { return &InstallGated{} }, []string{ConsumerTriggerDispatcher}},
	{"io.enforcement.install.failed.v1", []string{SubjectRoot, "install", "failed", "{cluster}", "{ruleNamespace}", "{rule}"},
		"An install intent could not be carried out.", func() Event { return &InstallFailed{} }, []string{ConsumerRuleEngine}},
	{"io.enforcement.uninstall.done.v1", []string{SubjectRoot, "uninstall", "done", "{cluster}", "{ruleNamespace}", "{rule}"},
		"An uninstall intent was carried out.", func() Event { return &UninstallDone{} }, []string{ConsumerRuleEngine}},
	{"io.enforcement.application.health.v1", []string{SubjectRoot, "application", "health", "{cluster}", "{ruleNamespace}", "{rule}"},
		"Argo CD reports a new health, sync status or sync operation result for an Application argo-syncer owns.", func() Event { return &ApplicationHealth{} }, []string{ConsumerRuleEngine}},
	{"io.enforcement.trigger.delivered.v1", []string{SubjectRoot, "trigger", "delivered", "{phase}", "{cluster}", "{ruleNamespace}", "{rule}"},
		"A beforeInstall or afterInstall webhook answered 2xx.", func() Event { return &TriggerDelivered{} }, []string{ConsumerRuleEngine, ConsumerArgoSyncer}},
	{"io.enforcement.trigger.failed.v1", []string{SubjectRoot, "trigger", "failed", "{phase}", "{cluster}", "{ruleNamespace}", "{rule}"},
		"A webhook did not answer 2xx after all retries.", func() Event { return &TriggerFailed{} }, []string{ConsumerRuleEngine, ConsumerArgoSyncer}},
	{"io.enforcement.trigger.attempted.v1", []string{SubjectRoot, "trigger", "attempted", "{phase}", "{cluster}", "{ruleNamespace}", "{rule}"},
		"One HTTP attempt of a beforeInstall or afterInstall webhook delivery, with its result.", func() Event { return &TriggerAttempted{} }, nil},
	{"io.enforcement.compliance.changed.v1", []string{SubjectRoot, "compliance", "changed", "{cluster}"},
		"The folded OCM Policy compliance of a managed cluster took a new value.", func() Event { return &ComplianceChanged{} }, []string{ConsumerClaimWriter}},
	{"io.enforcement.claim.updated.v1", []string{SubjectRoot, "claim", "updated", "{cluster}"},
		"The claim writer wrote the compliance ClusterClaim.", func() Event { return &ClaimUpdated{} }, nil},
}

var byType = func() map[string]*descriptor {
	m := make(map[string]*descriptor, len(catalog))
	for i := range catalog {
		m[catalog[i].Type] = &catalog[i]
	}
	return m
}()

// Types lists every event type name of the contract, in catalog order.
func Types() []string {
	out := make([]string, len(catalog))
	for i, d := range catalog {
		out[i] = d.Type
	}
	return out
}

func mustDescribe(t string) *descriptor {
	d, ok := byType[t]
	if !ok {
		panic("events: type " + t + " is not in the catalog")
	}
	return d
}

// id joins a kind and key parts into an event id; each part is escaped so ':' cannot be forged.
func id(kind string, parts ...string) string {
	var b strings.Builder
	b.WriteString(kind)
	for _, p := range parts {
		b.WriteByte(':')
		b.WriteString(EscapeToken(p))
	}
	return b.String()
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }
func i64(v int64) string  { return strconv.FormatInt(v, 10) }

func clusterKey(s SourceRef, key string) string { return "cluster:" + s.ID + ":" + key }
func pairKey(r RuleRef, cluster string) string {
	return "rule:" + r.Namespace + "/" + r.Name + ":" + cluster
}

// ClusterAppeared

func (*ClusterAppeared) Type() string { return "io.enforcement.cluster.appeared.v1" }
func (e *ClusterAppeared) ID() string {
	return id("cluster-appeared", e.Cluster.Source.ID, e.Cluster.Key, u64(e.Revision))
}
func (e *ClusterAppeared) OrderingKey() string { return clusterKey(e.Cluster.Source, e.Cluster.Key) }
func (e *ClusterAppeared) Validate() error     { return e.Cluster.validate() }
func (e *ClusterAppeared) subjectKeys() []string {
	return []string{e.Cluster.Source.Kind, e.Cluster.Source.ID, e.Cluster.Name}
}

// ClusterUpdated

func (*ClusterUpdated) Type() string { return "io.enforcement.cluster.updated.v1" }
func (e *ClusterUpdated) ID() string {
	return id("cluster-updated", e.Cluster.Source.ID, e.Cluster.Key, u64(e.Revision))
}
func (e *ClusterUpdated) OrderingKey() string { return clusterKey(e.Cluster.Source, e.Cluster.Key) }
func (e *ClusterUpdated) Validate() error     { return e.Cluster.validate() }
func (e *ClusterUpdated) subjectKeys() []string {
	return []string{e.Cluster.Source.Kind, e.Cluster.Source.ID, e.Cluster.Name}
}

// ClusterGone

func (*ClusterGone) Type() string { return "io.enforcement.cluster.gone.v1" }
func (e *ClusterGone) ID() string {
	return id("cluster-gone", e.Source.ID, e.Key, u64(e.Revision))
}
func (e *ClusterGone) OrderingKey() string { return clusterKey(e.Source, e.Key) }
func (e *ClusterGone) Validate() error {
	return required("cluster gone: source.kind, source.id, key, name", e.Source.Kind, e.Source.ID, e.Key, e.Name)
}
func (e *ClusterGone) subjectKeys() []string { return []string{e.Source.Kind, e.Source.ID, e.Name} }

// SourceDegraded

func (*SourceDegraded) Type() string { return "io.enforcement.source.degraded.v1" }
func (e *SourceDegraded) ID() string {
	return id("source-degraded", e.Source.ID, u64(e.Scan), e.Reason)
}
func (e *SourceDegraded) OrderingKey() string { return "source:" + e.Source.ID }
func (e *SourceDegraded) Validate() error {
	return required("source degraded: source.kind, source.id, reason", e.Source.Kind, e.Source.ID, e.Reason)
}
func (e *SourceDegraded) subjectKeys() []string { return []string{e.Source.Kind, e.Source.ID} }

// SourceRecovered

func (*SourceRecovered) Type() string { return "io.enforcement.source.recovered.v1" }

// ID is the degraded spell it ends: one recovery per spell, however often it is republished.
func (e *SourceRecovered) ID() string {
	return id("source-recovered", e.Source.ID, u64(e.DegradedSince))
}

// OrderingKey is the one of SourceDegraded, so a consumer sees a source's reports in order.
func (e *SourceRecovered) OrderingKey() string { return "source:" + e.Source.ID }
func (e *SourceRecovered) Validate() error {
	if e.DegradedSince == 0 || e.Scan <= e.DegradedSince {
		return fmt.Errorf("source recovered: scan %d must come after degradedSince %d (> 0)", e.Scan, e.DegradedSince)
	}
	return required("source recovered: source.kind, source.id", e.Source.Kind, e.Source.ID)
}
func (e *SourceRecovered) subjectKeys() []string { return []string{e.Source.Kind, e.Source.ID} }

// SourceListed

func (*SourceListed) Type() string { return "io.enforcement.source.listed.v1" }

// ID is the scan: announcing one scan's listing twice is one event.
func (e *SourceListed) ID() string { return id("source-listed", e.Source.ID, u64(e.Scan)) }

// OrderingKey is the one of SourceDegraded, so a consumer sees a source's reports in order.
func (e *SourceListed) OrderingKey() string { return "source:" + e.Source.ID }
func (e *SourceListed) Validate() error {
	if e.Known < 0 {
		return fmt.Errorf("source listed: known %d must not be negative", e.Known)
	}
	return required("source listed: source.kind, source.id", e.Source.Kind, e.Source.ID)
}
func (e *SourceListed) subjectKeys() []string { return []string{e.Source.Kind, e.Source.ID} }

// RemovalsReleased

func (*RemovalsReleased) Type() string { return "io.enforcement.removals.released.v1" }

// ID is the trip: releasing the same trip twice is one release.
func (e *RemovalsReleased) ID() string {
	return id("removals-released", e.Source.ID, u64(e.Trip))
}
func (e *RemovalsReleased) OrderingKey() string { return "source:" + e.Source.ID }
func (e *RemovalsReleased) Validate() error {
	if e.Trip == 0 {
		return errors.New("removals released: trip: want the scan number that held the removals")
	}
	return required("removals released: source.kind, source.id", e.Source.Kind, e.Source.ID)
}
func (e *RemovalsReleased) subjectKeys() []string { return []string{e.Source.Kind, e.Source.ID} }

// RuleRemovalsReleased

func (*RuleRemovalsReleased) Type() string { return "io.enforcement.rule.removals.released.v1" }

// ID is the rule generation: releasing the same hold twice is one release.
func (e *RuleRemovalsReleased) ID() string {
	return id("rule-removals-released", e.Rule.Namespace, e.Rule.Name, i64(e.Rule.Generation))
}
func (e *RuleRemovalsReleased) OrderingKey() string {
	return "rule:" + e.Rule.Namespace + "/" + e.Rule.Name
}
func (e *RuleRemovalsReleased) Validate() error {
	if e.Rule.Generation <= 0 {
		return errors.New("rule removals released: rule.generation: want the generation that held the removals")
	}
	return required("rule removals released: rule.namespace, rule.name", e.Rule.Namespace, e.Rule.Name)
}
func (e *RuleRemovalsReleased) subjectKeys() []string { return []string{e.Rule.Namespace, e.Rule.Name} }

// RolloutApproved

func (*RolloutApproved) Type() string { return "io.enforcement.rule.rollout.approved.v1" }

// ID is the rule generation and step: approving the same step twice is one approval.
func (e *RolloutApproved) ID() string {
	return id("rollout-approved", e.Rule.Namespace, e.Rule.Name, i64(e.Rule.Generation), e.Step)
}
func (e *RolloutApproved) OrderingKey() string { return "rule:" + e.Rule.Namespace + "/" + e.Rule.Name }
func (e *RolloutApproved) Validate() error {
	if e.Rule.Generation <= 0 {
		return errors.New("rollout approved: rule.generation: want the generation whose rollout is approved")
	}
	return required("rollout approved: rule.namespace, rule.name, step", e.Rule.Namespace, e.Rule.Name, e.Step)
}
func (e *RolloutApproved) subjectKeys() []string { return []string{e.Rule.Namespace, e.Rule.Name} }

// RolloutProgressed

func (*RolloutProgressed) Type() string { return "io.enforcement.rule.rollout.progressed.v1" }

// ID is the rule generation, step and phase, and the halting Application: each move of a
// rollout is told once, however often the engine decides it again.
func (e *RolloutProgressed) ID() string {
	return id("rollout-progressed", e.Rule.Namespace, e.Rule.Name, i64(e.Rule.Generation), e.Step, e.Phase, e.Application)
}
func (e *RolloutProgressed) OrderingKey() string {
	return "rule:" + e.Rule.Namespace + "/" + e.Rule.Name
}
func (e *RolloutProgressed) Validate() error {
	if e.Rule.Generation <= 0 {
		return errors.New("rollout progressed: rule.generation: want the generation being rolled out")
	}
	return required("rollout progressed: rule.namespace, rule.name, phase", e.Rule.Namespace, e.Rule.Name, e.Phase)
}
func (e *RolloutProgressed) subjectKeys() []string { return []string{e.Rule.Namespace, e.Rule.Name} }

// InstallIntent

func (*InstallIntent) Type() string { return "io.enforcement.intent.install.v1" }

// ID includes the rule generation, the cluster's inventory revision and the spec hash, so an
// uninstall followed by a reinstall (or a changed render) is a new event.
func (e *InstallIntent) ID() string {
	return id("install", e.Rule.Namespace, e.Rule.Name, i64(e.Rule.Generation), e.Cluster.Name,
		u64(e.Cluster.Revision), e.Enforcement.Name, e.SpecHash)
}
func (e *InstallIntent) OrderingKey() string { return pairKey(e.Rule, e.Cluster.Name) }
func (e *InstallIntent) Validate() error {
	return required("install intent: rule, cluster name, enforcement name, repo, spec hash",
		e.Rule.Namespace, e.Rule.Name, e.Cluster.Name, e.Enforcement.Name, e.Enforcement.Repo, e.SpecHash)
}
func (e *InstallIntent) subjectKeys() []string {
	return []string{e.Cluster.Name, e.Rule.Namespace, e.Rule.Name}
}

// UninstallIntent

func (*UninstallIntent) Type() string { return "io.enforcement.intent.uninstall.v1" }

// ID ends in the target's identity when it has one: a rule may uninstall one enforcement from
// two clusters of the same name at the same revision (a pair of its old source whose takeover
// argo-syncer refused next to its successor, or two clusters of one name), and neither uninstall
// may be deduplicated away.
func (e *UninstallIntent) ID() string {
	parts := []string{e.Rule.Namespace, e.Rule.Name, i64(e.Rule.Generation), e.Cluster.Name,
		u64(e.Cluster.Revision), e.Enforcement}
	if e.Cluster.Identity != "" {
		parts = append(parts, e.Cluster.Identity)
	}
	return id("uninstall", parts...)
}
func (e *UninstallIntent) OrderingKey() string { return pairKey(e.Rule, e.Cluster.Name) }
func (e *UninstallIntent) Validate() error {
	return required("uninstall intent: rule, cluster name, enforcement, reason",
		e.Rule.Namespace, e.Rule.Name, e.Cluster.Name, e.Enforcement, e.Reason)
}
func (e *UninstallIntent) subjectKeys() []string {
	return []string{e.Cluster.Name, e.Rule.Namespace, e.Rule.Name}
}

// InstallSucceeded

func (*InstallSucceeded) Type() string { return "io.enforcement.install.succeeded.v1" }
func (e *InstallSucceeded) ID() string {
	return "install-succeeded:" + e.IntentID + restoredSuffix(e.Restored)
}
func (e *InstallSucceeded) OrderingKey() string { return pairKey(e.Rule, e.Cluster) }
func (e *InstallSucceeded) Validate() error {
	return required("install succeeded: intentId, rule, cluster, enforcement",
		e.IntentID, e.Rule.Namespace, e.Rule.Name, e.Cluster, e.Enforcement)
}
func (e *InstallSucceeded) subjectKeys() []string {
	return []string{e.Cluster, e.Rule.Namespace, e.Rule.Name}
}

// restoredSuffix makes the outcome of a resync's restore an event of its own, so that the
// server's deduplication does not drop it as a repeat of the intent's first outcome.
func restoredSuffix(round string) string {
	if round == "" {
		return ""
	}
	return ":restored:" + EscapeToken(round)
}

// InstallGated

func (*InstallGated) Type() string          { return "io.enforcement.install.gated.v1" }
func (e *InstallGated) ID() string          { return "install-gated:" + e.IntentID }
func (e *InstallGated) OrderingKey() string { return pairKey(e.Intent.Rule, e.Intent.Cluster.Name) }
func (e *InstallGated) Validate() error {
	if err := required("install gated: intentId, application", e.IntentID, e.Application); err != nil {
		return err
	}
	if err := e.Intent.Validate(); err != nil {
		return fmt.Errorf("install gated: %w", err)
	}
	if e.Intent.Triggers == nil || e.Intent.Triggers.BeforeInstall == nil {
		return errors.New("install gated: intent has no beforeInstall trigger")
	}
	return nil
}
func (e *InstallGated) subjectKeys() []string {
	return []string{e.Intent.Cluster.Name, e.Intent.Rule.Namespace, e.Intent.Rule.Name}
}

// InstallFailed

func (*InstallFailed) Type() string { return "io.enforcement.install.failed.v1" }

// ID includes the reason, so a later failure of the same intent for another reason is recorded.
func (e *InstallFailed) ID() string {
	return "install-failed:" + e.IntentID + ":" + EscapeToken(e.Reason)
}
func (e *InstallFailed) OrderingKey() string { return pairKey(e.Rule, e.Cluster) }
func (e *InstallFailed) Validate() error {
	return required("install failed: intentId, rule, cluster, enforcement, reason",
		e.IntentID, e.Rule.Namespace, e.Rule.Name, e.Cluster, e.Enforcement, e.Reason)
}
func (e *InstallFailed) subjectKeys() []string {
	return []string{e.Cluster, e.Rule.Namespace, e.Rule.Name}
}

// UninstallDone

func (*UninstallDone) Type() string { return "io.enforcement.uninstall.done.v1" }
func (e *UninstallDone) ID() string {
	return "uninstall-done:" + e.IntentID + restoredSuffix(e.Restored)
}
func (e *UninstallDone) OrderingKey() string { return pairKey(e.Rule, e.Cluster) }
func (e *UninstallDone) Validate() error {
	return required("uninstall done: intentId, rule, cluster, enforcement",
		e.IntentID, e.Rule.Namespace, e.Rule.Name, e.Cluster, e.Enforcement)
}
func (e *UninstallDone) subjectKeys() []string {
	return []string{e.Cluster, e.Rule.Namespace, e.Rule.Name}
}

// TriggerDelivered

func (*TriggerDelivered) Type() string          { return "io.enforcement.trigger.delivered.v1" }
func (e *TriggerDelivered) ID() string          { return "trigger-delivered:" + e.DeliveryID }
func (e *TriggerDelivered) OrderingKey() string { return pairKey(e.Rule, e.Cluster) }
func (e *TriggerDelivered) Validate() error {
	if err := validPhase(e.Phase); err != nil {
		return err
	}
	return required("trigger delivered: deliveryId, intentId, rule, cluster",
		e.DeliveryID, e.IntentID, e.Rule.Namespace, e.Rule.Name, e.Cluster)
}
func (e *TriggerDelivered) subjectKeys() []string {
	return []string{e.Phase, e.Cluster, e.Rule.Namespace, e.Rule.Name}
}

// TriggerFailed

func (*TriggerFailed) Type() string          { return "io.enforcement.trigger.failed.v1" }
func (e *TriggerFailed) ID() string          { return "trigger-failed:" + e.DeliveryID }
func (e *TriggerFailed) OrderingKey() string { return pairKey(e.Rule, e.Cluster) }
func (e *TriggerFailed) Validate() error {
	if err := validPhase(e.Phase); err != nil {
		return err
	}
	return required("trigger failed: deliveryId, intentId, rule, cluster",
		e.DeliveryID, e.IntentID, e.Rule.Namespace, e.Rule.Name, e.Cluster)
}
func (e *TriggerFailed) subjectKeys() []string {
	return []string{e.Phase, e.Cluster, e.Rule.Namespace, e.Rule.Name}
}

// TriggerAttempted

func (*TriggerAttempted) Type() string { return "io.enforcement.trigger.attempted.v1" }

// ID includes the series and the attempt number, so that every attempt is recorded, also when a
// delivery is repeated after a restart.
func (e *TriggerAttempted) ID() string {
	return id("trigger-attempted", e.DeliveryID, e.Series, strconv.Itoa(e.Attempt))
}
func (e *TriggerAttempted) OrderingKey() string { return pairKey(e.Rule, e.Cluster) }
func (e *TriggerAttempted) Validate() error {
	if err := validPhase(e.Phase); err != nil {
		return err
	}
	if e.Attempt < 1 {
		return fmt.Errorf("trigger attempted: attempt %d: want 1 or more", e.Attempt)
	}
	return required("trigger attempted: deliveryId, intentId, rule, cluster, series, result",
		e.DeliveryID, e.IntentID, e.Rule.Namespace, e.Rule.Name, e.Cluster, e.Series, e.Result)
}
func (e *TriggerAttempted) subjectKeys() []string {
	return []string{e.Phase, e.Cluster, e.Rule.Namespace, e.Rule.Name}
}

func validPhase(p string) error {
	if p != PhaseBeforeInstall && p != PhaseAfterInstall {
		return fmt.Errorf("trigger phase %q: want %q or %q", p, PhaseBeforeInstall, PhaseAfterInstall)
	}
	return nil
}

// ComplianceChanged

func (*ComplianceChanged) Type() string { return "io.enforcement.compliance.changed.v1" }

// ID includes when the value began to hold, so compliant → noncompliant → compliant is three events.
func (e *ComplianceChanged) ID() string {
	return id("compliance", e.Cluster, e.Claim, e.Value, i64(e.Since.UnixNano()))
}
func (e *ComplianceChanged) OrderingKey() string { return "compliance:" + e.Cluster }
func (e *ComplianceChanged) Validate() error {
	switch e.Value {
	case Compliant, NonCompliant, Empty:
	default:
		return fmt.Errorf("compliance changed: value %q: want %q, %q or %q", e.Value, Compliant, NonCompliant, Empty)
	}
	return required("compliance changed: cluster, claim", e.Cluster, e.Claim)
}
func (e *ComplianceChanged) subjectKeys() []string { return []string{e.Cluster} }

// ClaimUpdated

func (*ClaimUpdated) Type() string          { return "io.enforcement.claim.updated.v1" }
func (e *ClaimUpdated) ID() string          { return "claim-updated:" + e.ComplianceID }
func (e *ClaimUpdated) OrderingKey() string { return "compliance:" + e.Cluster }
func (e *ClaimUpdated) Validate() error {
	return required("claim updated: cluster, claim, value, complianceId", e.Cluster, e.Claim, e.Value, e.ComplianceID)
}
func (e *ClaimUpdated) subjectKeys() []string { return []string{e.Cluster} }

// ApplicationHealth

func (*ApplicationHealth) Type() string { return "io.enforcement.application.health.v1" }

// ID includes the Application's resourceVersion: a state that comes back later (Healthy,
// Degraded, Healthy again) is a new event, a redelivered watch event is not.
func (e *ApplicationHealth) ID() string {
	return id("application-health", e.Rule.Namespace, e.Rule.Name, e.Cluster, e.Enforcement, e.ResourceVersion)
}
func (e *ApplicationHealth) OrderingKey() string { return pairKey(e.Rule, e.Cluster) }
func (e *ApplicationHealth) Validate() error {
	return required("application health: rule, cluster, enforcement, application, resourceVersion",
		e.Rule.Namespace, e.Rule.Name, e.Cluster, e.Enforcement, e.Application, e.ResourceVersion)
}
func (e *ApplicationHealth) subjectKeys() []string {
	return []string{e.Cluster, e.Rule.Namespace, e.Rule.Name}
}
