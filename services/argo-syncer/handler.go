package main

// The handler turns events from the argo-syncer consumer into Syncer calls and outcome events.
//
// Trigger choreography (shared with trigger-dispatcher, see gates.go): an install intent with a
// beforeInstall trigger whose Application does not exist yet is recorded as waiting in
// argo-syncer's own bucket and announced with InstallGated; nothing is written to Kubernetes.
// trigger-dispatcher calls the webhook and publishes TriggerDelivered, or TriggerFailed with the
// trigger's failure policy. On TriggerDelivered, or TriggerFailed with policy Ignore, the handler
// installs the waiting intent if it is still the one waiting for its Application; with policy
// Fail the intent keeps waiting (rule-engine reports the install as blocked) until a later
// TriggerDelivered of a retried delivery. Updates of existing Applications never wait.
// InstallSucceeded{Created: true} is the afterInstall moment for trigger-dispatcher.

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// Handler handles the events of the argo-syncer consumer.
type Handler struct {
	syncer *Syncer
	pub    *events.Publisher
	gates  *gateStore
	// decisions order intents: a late or replayed one never undoes a newer one (decisions.go).
	decisions *decisionStore
	logger    *slog.Logger
	metrics   *Metrics

	routesOnce sync.Once
	routes     *events.Router
}

// Handle is the events.Handler: it hands each event to its handler in Routes.
func (h *Handler) Handle(ctx context.Context, e events.Event, m events.Meta) error {
	return h.Routes().Handle(ctx, e, m)
}

// Routes is the handler table of the argo-syncer consumer: intents, and beforeInstall trigger
// outcomes (an afterInstall outcome changes nothing here).
func (h *Handler) Routes() *events.Router {
	h.routesOnce.Do(func() {
		h.routes = events.NewRouter(events.ConsumerArgoSyncer,
			events.On(func(ctx context.Context, ev *events.InstallIntent, m events.Meta) error {
				return h.install(ctx, ev, m.DecisionSequence())
			}),
			events.On(func(ctx context.Context, ev *events.UninstallIntent, m events.Meta) error {
				return h.uninstall(ctx, ev, m.DecisionSequence())
			}),
			events.On(func(ctx context.Context, ev *events.TriggerDelivered, _ events.Meta) error {
				if ev.Phase != events.PhaseBeforeInstall {
					return nil
				}
				return h.release(ctx, ev.Rule, ev.Cluster, ev.Enforcement, ev.IntentID)
			}),
			events.On(h.onTriggerFailed),
		)
	})
	return h.routes
}

// onTriggerFailed releases a waiting install after a beforeInstall failure under policy Ignore;
// under Fail the install stays waiting (a retried delivery may still release it).
func (h *Handler) onTriggerFailed(ctx context.Context, ev *events.TriggerFailed, _ events.Meta) error {
	if ev.Phase != events.PhaseBeforeInstall {
		return nil
	}
	if ev.FailurePolicy == "Fail" {
		h.logger.Info("Install blocked by its beforeInstall trigger", "intent", ev.IntentID,
			"application", events.ApplicationName(ev.Cluster, ev.Enforcement), "rule", ev.Rule.String())
		return nil
	}
	return h.release(ctx, ev.Rule, ev.Cluster, ev.Enforcement, ev.IntentID)
}

// install runs one install intent whose decision sequence is seq. A stale one (a newer intent
// of its rule, cluster and enforcement was acted on) is skipped. One that has to wait for its
// beforeInstall trigger is recorded and announced; any other is carried out and its outcome
// published.
func (h *Handler) install(ctx context.Context, in *events.InstallIntent, seq uint64) error {
	// A name taken by another cluster is refused before the intent is recorded as the last
	// decision of (rule, cluster name, enforcement), which stays the other cluster's.
	app := events.ApplicationName(in.Cluster.Name, in.Enforcement.Name)
	if err := h.syncer.NameConflict(in.Rule, in.Cluster, in.Enforcement.Name); err != nil {
		return h.finish(ctx, in, seq, InstallResult{Application: app}, err, false)
	}
	stale, first, err := h.stale(ctx, in.Rule, in.Cluster.Name, in.Enforcement.Name, installRecord(in, seq),
		!h.syncer.hasApplication(in.Cluster.Name, in.Enforcement.Name))
	if stale || err != nil {
		return err
	}
	if first {
		h.syncer.quietStart(in.Cluster.Name, in.Enforcement.Name) // its empty first report is not sent (health.go)
	}
	res, err := h.syncer.Install(ctx, in, true)
	if err == nil && res.Waiting {
		return h.hold(ctx, in, seq, app)
	}
	return h.finish(ctx, in, seq, res, err, first)
}

// hold records the intent as the one waiting for its Application, then publishes InstallGated.
// Recording first makes a crash in between harmless: the redelivered intent records the same
// entry again and publishes the event under the same id.
func (h *Handler) hold(ctx context.Context, in *events.InstallIntent, seq uint64, app string) error {
	key := gateKey(in.Rule, app)
	cur, _, err := h.gates.get(ctx, key)
	if err != nil {
		return err
	}
	if cur == nil || cur.IntentID != in.ID() {
		if cur != nil {
			h.logger.Info("Replaced install waiting for beforeInstall", "application", app, "intent", in.ID(), "replaced", cur.IntentID)
		}
		entry := &gateEntry{IntentID: in.ID(), IntentSequence: seq, Application: app, Intent: *in, Since: time.Now().UTC()}
		if err := h.gates.put(ctx, key, entry); err != nil {
			return err
		}
	}
	if _, err := h.pub.Publish(ctx, &events.InstallGated{IntentID: in.ID(), IntentSequence: seq, Application: app, Intent: *in}); err != nil {
		return err
	}
	h.metrics.intent("install", "waiting")
	h.logger.Info("Waiting for beforeInstall trigger", "application", app, "intent", in.ID())
	return nil
}

// release installs the intent waiting for the Application of (rule, cluster, enforcement) when
// it is intentID. Otherwise the outcome is late: the intent was replaced by a newer one or
// uninstalled, and nothing is written.
func (h *Handler) release(ctx context.Context, rule events.RuleRef, cluster, enforcement, intentID string) error {
	app := events.ApplicationName(cluster, enforcement)
	entry, _, err := h.gates.get(ctx, gateKey(rule, app))
	if err != nil {
		return err
	}
	if entry == nil || entry.IntentID != intentID {
		h.logger.Info("Install intent no longer waiting for beforeInstall; nothing to release",
			"application", app, "intent", intentID, "rule", rule.String())
		return nil
	}
	in := &entry.Intent
	// Every newer intent replaces or removes the entry; one that still waits although a newer
	// decision was recorded (a crash between the two) is obsolete.
	newer, err := h.decisions.newer(ctx, decisionKey(rule, cluster, enforcement), entry.IntentSequence)
	if err != nil {
		return err
	}
	if newer != nil {
		h.skipped("install", in.ID(), app, entry.IntentSequence, newer)
		return h.ungate(ctx, rule, app, newer.IntentID)
	}
	res, err := h.syncer.Install(ctx, in, false)
	// The entry exists only while the Application did not exist when the intent arrived, and
	// every other intent for the Application replaces or removes it. An Application already as
	// this intent renders it was therefore created by an earlier run of this release that
	// stopped before it reported and removed the entry: that run was the creation.
	if err == nil && res.Unchanged {
		res.Created = true
	}
	return h.finish(ctx, in, entry.IntentSequence, res, err, false)
}

// finish publishes the outcome of an install that was carried out (or failed), then removes any
// intent waiting for the same Application: this one, released, or an older one it supersedes. A
// permanent failure is published and acknowledged (the event is the record); any other failure
// is published and retried, and the entry stays until the intent is done. seq is the intent's
// decision sequence. first is set when the intent is the first decision of its pair (see
// decisionStore.admit): no intent can be waiting, and the bucket is not read.
func (h *Handler) finish(ctx context.Context, in *events.InstallIntent, seq uint64, res InstallResult, err error, first bool) error {
	if err == nil {
		h.metrics.intent("install", "installed")
		if in.Triggers != nil && in.Triggers.BeforeInstall != nil {
			// Its trigger let it through: from now on the resync may restore it.
			if err := h.decisions.markApplied(ctx, decisionKey(in.Rule, in.Cluster.Name, in.Enforcement.Name), seq); err != nil {
				return err
			}
		}
		succeeded := &events.InstallSucceeded{
			IntentID: in.ID(), Rule: in.Rule, Cluster: in.Cluster.Name, Enforcement: in.Enforcement.Name,
			Application: res.Application, Created: res.Created, SpecHash: in.SpecHash, IntentSequence: seq,
		}
		if res.Created && in.Triggers != nil && in.Triggers.AfterInstall != nil {
			succeeded.Intent = in // the afterInstall moment, deliverable from this event alone
		}
		if _, err := h.pub.Publish(ctx, succeeded); err != nil {
			return err
		}
		if first {
			return nil
		}
		return h.ungate(ctx, in.Rule, events.ApplicationName(in.Cluster.Name, in.Enforcement.Name), in.ID())
	}
	h.metrics.intent("install", "failed")
	f := &failure{reason: ReasonAPIError, err: err}
	errors.As(err, &f)
	if _, pubErr := h.pub.Publish(ctx, &events.InstallFailed{
		IntentID: in.ID(), Rule: in.Rule, Cluster: in.Cluster.Name, Enforcement: in.Enforcement.Name,
		Application: res.Application, Reason: f.reason, Message: f.err.Error(), Permanent: f.permanent,
	}); pubErr != nil {
		return errors.Join(err, pubErr)
	}
	if !f.permanent {
		return err
	}
	h.logger.Error("Install rejected", "application", res.Application, "reason", f.reason, "error", f.err)
	if first {
		h.syncer.forgetQuietStart(in.Cluster.Name, in.Enforcement.Name)
		return nil
	}
	return h.ungate(ctx, in.Rule, events.ApplicationName(in.Cluster.Name, in.Enforcement.Name), in.ID())
}

// ungate removes the intent waiting for the rule's Application, if any; by names the intent
// that made it obsolete, for the log.
func (h *Handler) ungate(ctx context.Context, rule events.RuleRef, app, by string) error {
	waiting, err := h.gates.drop(ctx, gateKey(rule, app))
	if err == nil && waiting != "" && waiting != by {
		h.logger.Info("Dropped install waiting for beforeInstall", "application", app, "intent", waiting, "by", by)
	}
	return err
}

// uninstall runs one uninstall intent whose decision sequence is seq; a stale one is skipped.
func (h *Handler) uninstall(ctx context.Context, in *events.UninstallIntent, seq uint64) error {
	// Another cluster of the same name owns what is there: nothing to remove, and the last
	// decision stays that cluster's.
	app := events.ApplicationName(in.Cluster.Name, in.Enforcement)
	if err := h.syncer.NameConflict(in.Rule, in.Cluster, in.Enforcement); err != nil {
		h.logger.Info("Skipped uninstall of another cluster's objects", "application", app, "reason", err)
		_, err = h.pub.Publish(ctx, &events.UninstallDone{IntentID: in.ID(), Rule: in.Rule, Cluster: in.Cluster.Name, Enforcement: in.Enforcement, Application: app})
		return err
	}
	if stale, _, err := h.stale(ctx, in.Rule, in.Cluster.Name, in.Enforcement, uninstallRecord(in, seq), false); stale || err != nil {
		return err
	}
	h.syncer.forgetQuietStart(in.Cluster.Name, in.Enforcement)
	// The waiting install goes first, so that its trigger's outcome, however late, creates
	// nothing; a crash after this step repeats the uninstall, which finds no entry.
	if err := h.ungate(ctx, in.Rule, events.ApplicationName(in.Cluster.Name, in.Enforcement), in.ID()); err != nil {
		return err
	}
	res, err := h.syncer.Uninstall(ctx, in)
	if err != nil {
		var f *failure
		if errors.As(err, &f) && f.permanent {
			return events.Permanent(err)
		}
		return err
	}
	h.metrics.intent("uninstall", "uninstalled")
	_, err = h.pub.Publish(ctx, &events.UninstallDone{
		IntentID: in.ID(), Rule: in.Rule, Cluster: in.Cluster.Name, Enforcement: in.Enforcement,
		Application: res.Application, Deleted: res.Deleted,
	})
	return err
}

// stale records rec as the last decision for the rule's enforcement on cluster and reports
// false, or, when a newer decision was already acted on, logs and counts the intent as skipped
// and reports true: the caller acknowledges it without any write and publishes nothing, so no
// outcome of an old intent can pass for the current one's. likelyNew and first: see
// decisionStore.admit.
func (h *Handler) stale(ctx context.Context, rule events.RuleRef, cluster, enforcement string, rec decisionRecord, likelyNew bool) (stale, first bool, err error) {
	newer, first, err := h.decisions.admit(ctx, decisionKey(rule, cluster, enforcement), rec, likelyNew)
	if err != nil || newer == nil {
		return false, first, err
	}
	h.skipped(rec.Kind, rec.IntentID, events.ApplicationName(cluster, enforcement), rec.Sequence, newer)
	return true, false, nil
}

// skipped logs and counts an intent that a newer decision superseded.
func (h *Handler) skipped(kind, intentID, app string, seq uint64, newer *decisionRecord) {
	h.metrics.intent(kind, "stale")
	h.logger.Info("Skipped stale intent", "type", kind, "intent", intentID, "application", app,
		"sequence", seq, "newerIntent", newer.IntentID, "newerSequence", newer.Sequence)
}
