package main

// Outcomes. What the other services report back is folded into the state behind each rule's
// status: install outcomes (argo-syncer), trigger outcomes (trigger-dispatcher) into the record
// of the one enforcement they concern, and "source degraded" / "source recovered" (source-scanner)
// into a per-source mark that the status shows until the source recovers (see applyDegraded),
// and "source listed" into the listing a source handover waits for (handover.go). An outcome for
// an intent the pair no longer holds, or one already counted (redelivery), changes nothing.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// degradation is the last "source degraded" event of a source.
type degradation struct {
	reason, message string
	held            []string
	at              time.Time
}

// enfOutcome is an outcome addressed to one enforcement of one pair.
type enfOutcome struct {
	rule          events.RuleRef
	cluster, name string
	intentID      string
	// confirms is set for an install that succeeded: it confirms a takeover (handover.go).
	confirms bool
	// fold applies the outcome to the enforcement's state; false: it does not concern that
	// state (an outcome of another intent, or nothing to change), which stays as it is.
	fold func(st *enfState) bool
	// event is the outcome event, told in the rule's Kubernetes Events once it changed the state.
	event events.Event
}

// applyOutcome folds an install, trigger or source outcome into the state behind the status.
// Install and trigger outcomes are folded together with the other reports waiting for the
// mutex (reports.go). A source's complete listing or recovery then completes the handovers
// waiting for it (completeHandovers takes the mutex itself, so their renders are made outside
// it).
func (e *engine) applyOutcome(ctx context.Context, ev events.Event, meta events.Meta) error {
	if o, ok := enfOutcomeOf(ev); ok {
		return e.foldReport(ctx, func(ctx context.Context) (reportFold, error) { return e.foldOutcome(ctx, ev.ID(), o) })
	}
	if err := e.foldSourceOutcome(ctx, ev, meta); err != nil {
		return err
	}
	switch s := ev.(type) {
	case *events.SourceListed:
		return e.completeHandovers(ctx, s.Source.ID)
	case *events.SourceRecovered:
		return e.completeHandovers(ctx, s.Source.ID)
	}
	return nil
}

// foldSourceOutcome is applyOutcome's change of the state for a source's outcome, under the
// mutex.
func (e *engine) foldSourceOutcome(ctx context.Context, ev events.Event, meta events.Meta) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch s := ev.(type) {
	case *events.SourceDegraded:
		return e.applyDegraded(ctx, s, meta)
	case *events.SourceRecovered:
		return e.applyRecovered(ctx, s, meta)
	case *events.SourceListed:
		return e.applyListed(ctx, s)
	}
	return nil // uninstall done and anything else: nothing to keep
}

// applyDegraded marks the source degraded and tells its rules. The mark is stored (key
// "degraded.<source id>" of the state bucket) before it is applied, so a restart keeps the
// condition; it ends with the source's "source recovered" event, or when no report renewed it
// for degradedTTL (the scanner repeats "source degraded" every scan while the source is degraded).
func (e *engine) applyDegraded(ctx context.Context, d *events.SourceDegraded, meta events.Meta) error {
	at := e.eventTime(meta)
	if prev := e.degraded[d.Source.ID]; prev != nil && prev.at.After(at) {
		return nil // an older scan's report
	}
	deg := &degradation{reason: d.Reason, message: d.Message, held: d.HeldRemovals, at: at}
	if err := e.store.putDegraded(ctx, d.Source.ID, deg); err != nil {
		return err
	}
	e.degraded[d.Source.ID] = deg
	e.notifySource(d.Source.ID)
	return nil
}

// applyRecovered clears the source's degradation (stored first) and tells its rules, unless a
// degraded report newer than the recovery is in place.
func (e *engine) applyRecovered(ctx context.Context, r *events.SourceRecovered, meta events.Meta) error {
	deg := e.degraded[r.Source.ID]
	if deg == nil || deg.at.After(e.eventTime(meta)) {
		return nil
	}
	if err := e.store.putDegraded(ctx, r.Source.ID, nil); err != nil {
		return err
	}
	delete(e.degraded, r.Source.ID)
	e.log.Info("Source recovered", "source", r.Source.ID, "kind", r.Source.Kind, "scan", r.Scan, "was", deg.reason)
	e.notifySource(r.Source.ID)
	return nil // applyOutcome completes the handovers, outside the mutex
}

// eventTime is when an event was published (its ce-time), or now when it carries none.
func (e *engine) eventTime(meta events.Meta) time.Time {
	if meta.Time.IsZero() {
		return e.now()
	}
	return meta.Time
}

// notifySource tells every rule of a source that its status may have changed.
func (e *engine) notifySource(sourceID string) {
	for _, r := range e.rulesBySource[sourceID] {
		e.notify(r.key)
	}
}

// enfOutcomeOf addresses an install or trigger outcome to its enforcement; false for any other
// event.
func enfOutcomeOf(ev events.Event) (enfOutcome, bool) {
	switch o := ev.(type) {
	case *events.InstallSucceeded:
		return enfOutcome{o.Rule, o.Cluster, o.Enforcement, o.IntentID, true, func(st *enfState) bool { return st.foldInstallSucceeded(o) }, o}, true
	case *events.InstallFailed:
		return enfOutcome{o.Rule, o.Cluster, o.Enforcement, o.IntentID, false, func(st *enfState) bool { return st.foldInstallFailed(o) }, o}, true
	case *events.TriggerFailed:
		return enfOutcome{o.Rule, o.Cluster, o.Enforcement, o.IntentID, false, func(st *enfState) bool { return st.foldTriggerFailed(o) }, o}, true
	case *events.TriggerDelivered:
		return enfOutcome{o.Rule, o.Cluster, o.Enforcement, o.IntentID, false, func(st *enfState) bool { return st.foldTriggerDelivered(o) }, o}, true
	}
	return enfOutcome{}, false
}

// foldOutcome folds the outcome with event id id into its enforcement's record: the record to
// store, then the rule's Kubernetes Events and status to tell (reports.go). Outcomes name the
// cluster, not the pair, and a rule may hold several pairs of one name (engine.setPair): the pair
// whose enforcement holds the outcome's intent gets it, else the first (one not handed over
// before one that is) whose state it concerns. An install that succeeded also confirms a
// takeover: the old source's pairs handed over to this one let go of the enforcement first
// (confirmTakeover).
func (e *engine) foldOutcome(ctx context.Context, id string, o enfOutcome) (reportFold, error) {
	key := o.rule.Namespace + "/" + o.rule.Name
	cid, p := e.outcomePair(key, o)
	if p == nil {
		return reportFold{}, nil
	}
	st := p.Enforcements.get(o.name)
	if st.isLastOutcome(id) {
		return reportFold{}, nil // a redelivery already counted
	}
	// Copy on write: memory changes only after the record is stored.
	next := p.clone()
	nst := next.Enforcements.get(o.name)
	if !o.fold(nst) {
		return reportFold{}, nil
	}
	nst.recordOutcome(id)
	if o.confirms {
		if err := e.confirmTakeover(ctx, key, cid, o.cluster, o.name); err != nil {
			return reportFold{}, err
		}
	}
	return reportFold{updates: []pairUpdate{{rule: key, cid: cid, next: next}}, then: func() {
		e.kubeEvents.outcome(o.event)
		e.notify(key)
	}}, nil
}

// outcomePair finds the pair an outcome is addressed to (see foldOutcome) and its cluster id;
// nil when none of the rule's pairs of that name holds the enforcement.
func (e *engine) outcomePair(rule string, o enfOutcome) (string, *pairState) {
	cids := e.pairsNamed(rule, o.cluster)
	for _, cid := range cids {
		if st := e.pairs[rule][cid].Enforcements.get(o.name); st != nil && st.isIntent(o.intentID) {
			return cid, e.pairs[rule][cid]
		}
	}
	slices.SortStableFunc(cids, func(a, b string) int {
		return compareBools(e.pairs[rule][a].handedOverTo() != "", e.pairs[rule][b].handedOverTo() != "")
	})
	for _, cid := range cids {
		if st := e.pairs[rule][cid].Enforcements.get(o.name); st != nil && o.fold(st.cloneState()) {
			return cid, e.pairs[rule][cid]
		}
	}
	return "", nil
}

// compareBools orders false before true.
func compareBools(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// foldInstallSucceeded: the Application is installed, which clears a failure and a trigger
// block. It concerns the current intent, or one with the same spec.
func (st *enfState) foldInstallSucceeded(o *events.InstallSucceeded) bool {
	if st.SpecHash != o.SpecHash && !st.isIntent(o.IntentID) {
		return false
	}
	st.Installed = true
	st.changeTrouble(func(t *enfTrouble) { t.Failure, t.TriggerBlocked = failure{}, "" })
	return true
}

// foldInstallFailed records the failure of the current intent, counting failures in a row.
func (st *enfState) foldInstallFailed(o *events.InstallFailed) bool {
	if !st.isIntent(o.IntentID) {
		return false
	}
	count := int32(1)
	if f := st.lastFailure(); f != nil {
		count = f.Count + 1
	}
	st.Installed = false
	st.changeTrouble(func(t *enfTrouble) {
		t.Failure = failure{Reason: o.Reason, Message: truncate(o.Message, 512), Count: count}
	})
	return true
}

// foldTriggerFailed records a trigger failure of the current intent under failurePolicy Fail.
// Only a beforeInstall failure holds the install (argo-syncer does not create the Application).
// An afterInstall one comes after the Application was created: it is reported, but the install
// is not blocked.
func (st *enfState) foldTriggerFailed(o *events.TriggerFailed) bool {
	if !st.isIntent(o.IntentID) || o.FailurePolicy != "Fail" {
		return false
	}
	msg := fmt.Sprintf("%s trigger: %s", o.Phase, truncate(o.Message, 256))
	st.changeTrouble(func(t *enfTrouble) {
		if o.Phase == events.PhaseAfterInstall {
			t.AfterInstallFailed = msg
		} else {
			t.TriggerBlocked = msg
		}
	})
	return true
}

// foldTriggerDelivered clears what a failure of the same phase of the current intent left: the
// afterInstall failure or the trigger block.
func (st *enfState) foldTriggerDelivered(o *events.TriggerDelivered) bool {
	if !st.isIntent(o.IntentID) {
		return false
	}
	if o.Phase == events.PhaseAfterInstall {
		if st.afterInstallFailed() == "" {
			return false
		}
		st.changeTrouble(func(t *enfTrouble) { t.AfterInstallFailed = "" })
		return true
	}
	if st.triggerBlocked() == "" {
		return false
	}
	st.changeTrouble(func(t *enfTrouble) { t.TriggerBlocked = "" })
	return true
}

// truncate cuts s to n bytes, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
