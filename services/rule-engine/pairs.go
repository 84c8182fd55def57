package main

// Pair evaluation. A (rule, cluster) pair is the unit of decision: given what the pair was last
// told to install, the rule as compiled and the cluster as the view has it, evalPair appends to a
// change the install and uninstall intents the pair needs and its next record. It decides only;
// commit carries the change out.

import (
	"slices"
	"strings"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// evalPair decides what one (rule, cluster) pair needs and appends it to ch. r may be nil (a
// rule not loaded yet: its pairs are only touched when their cluster is gone); rec is nil when
// the cluster is gone (goneRevision) or unknown.
func (e *engine) evalPair(r *ruleState, rule, cid string, rec *clusterRecord, goneRevision uint64, ch *change) {
	e.evalPairVars(r, rule, cid, rec, goneRevision, ch, &clusterVars{rec: rec})
}

// clusterVars are the template variables of the cluster of rec and their hash, computed at most
// once however many rules evaluate the cluster, and only when needed: a record in the engine's
// view knows its hash already (compact), and the variables only a render needs.
type clusterVars struct {
	rec  *clusterRecord
	vars map[string]any
	hash string
}

// variables returns the cluster's template variables.
func (cv *clusterVars) variables() map[string]any {
	if cv.vars == nil {
		cv.vars = cv.rec.templateVars()
	}
	return cv.vars
}

// varsHash returns the hash of the cluster's template variables.
func (cv *clusterVars) varsHash() string {
	if cv.hash == "" {
		cv.hash = cv.rec.templateHash
	}
	if cv.hash == "" {
		cv.hash = varsHash(cv.variables())
	}
	return cv.hash
}

// evalPairVars is evalPair with the cluster's variables shared across rules. The decision table,
// in order:
//
//	cluster gone                       -> uninstall all (ClusterGone, orphan) and drop the pair
//	cluster not in the view            -> keep the pair as it is (only ClusterGone removes)
//	rule unknown or invalid            -> keep the pair as it is
//	pair of the rule's old source      -> keep it while the new source has not listed, or
//	                                      while a cluster of the new source with its name
//	                                      takes it over (handover.go); otherwise as below
//	rule no longer selects the cluster -> uninstall all (NoLongerMatches, rule's policy), drop;
//	                                      a removal the rule edit breaker holds waits
//	cluster present but not eligible   -> keep the pair as it is (eligibility never removes)
//	an old-source pair has its name    -> wait while the new source has not listed; then take
//	                                      that pair over in place (handover.go); the old pair
//	                                      stays until argo-syncer confirms the takeover
//	same render key and URL as before  -> nothing to do
//	render not made yet                -> nothing yet: the render is added to ch.renders.need
//	template error                     -> keep the pair, record the error for the status
//	otherwise                          -> install what is new or changed, uninstall what the
//	                                      render no longer has (EnforcementRemoved)
func (e *engine) evalPairVars(r *ruleState, rule, cid string, rec *clusterRecord, goneRevision uint64, ch *change, cv *clusterVars) {
	if rec != nil {
		r = e.generationFor(r, cid, ch) // a staged rollout may not have reached the cluster yet
	}
	old := e.pairs[rule][cid]
	switch {
	case rec == nil:
		uninstallMissing(r, rule, cid, old, goneRevision, ch)
	case r == nil || r.invalid != nil:
		// Unknown or unusable rule: keep what the pair has.
	case foreignPair(r, old) && e.handoverWaits(r.sel.source.ID):
		// The rule's source changed and the new source has not listed yet: the pair waits, but
		// an enforcement removed from the rule goes now.
		e.uninstallRemovedWhileWaiting(r, cid, rec, old, ch, cv)
	case foreignPair(r, old) && e.hasSuccessor(r, old.Cluster.Value().Name, ch):
		// The cluster of the new source with its name takes it over (takeOver, which also
		// uninstalls what the rule no longer has), or keeps it waiting while not eligible.
	case !r.sel.selects(&rec.Cluster):
		r.clearRenderError(cid)
		if !e.isHeld(rule, cid) { // a held removal waits for its release
			uninstallUnselected(r, rule, cid, rec, old, ch)
		}
	case !rec.Cluster.Eligible:
		// Present but not eligible: keeps what it has, gets nothing new.
	case old == nil:
		pcid, pred := e.predecessor(r, cid, rec)
		switch {
		case pred == nil:
			e.evalSelected(r, rule, cid, rec, nil, ch, cv)
		case e.handoverWaits(r.sel.source.ID):
			// Its name's Applications belong to a pair of the old source until the handover.
		default:
			e.takeOver(r, cid, rec, pcid, pred, ch, cv)
		}
	default:
		e.evalSelected(r, rule, cid, rec, old, ch, cv)
	}
}

// takeOver moves the pair pred of the rule's old source (cluster id pcid) to cluster cid of its
// new source, which has the same name: the render is diffed against pred, and every enforcement
// is sent again for the new target (Replaces names pred's identity when it changed). pred's
// record is not dropped yet: it keeps the enforcements sent again, marked HandedOverTo cid,
// until argo-syncer confirms each of them (confirmTakeover), so that a refused takeover
// (NameConflict) leaves the old Applications with a pair that knows them. A template error keeps
// pred as it is.
func (e *engine) takeOver(r *ruleState, cid string, rec *clusterRecord, pcid string, pred *pairState, ch *change, cv *clusterVars) {
	renderKey := r.renderKey(cv)
	enfs, ok, err := r.rendered(cid, renderKey, cv, ch)
	if !ok {
		return // rendered outside the mutex, then evaluated again
	}
	if err != nil {
		r.renderError(cid, rec.Cluster.Name, err)
		return
	}
	r.clearRenderError(cid)
	r.clearRenderError(pcid)
	replaces, from := "", pred.Cluster.Value().Identity
	if from != "" && from != rec.Cluster.Identity {
		replaces = from
	}
	next, intents := r.diffPairFor(rec, pred, renderKey, enfs, replaces)
	e.log.Info("Took over a cluster from the rule's old source", "rule", r.key, "cluster", rec.Cluster.Name,
		"from", from, "to", rec.Cluster.Identity)
	ch.intents = append(ch.intents, intents...)
	ch.pairs = append(ch.pairs, pairUpdate{rule: r.key, cid: pcid, next: handedOver(pred, next, cid)},
		pairUpdate{rule: r.key, cid: cid, next: next})
}

// handedOver is the record pred keeps once cluster cid took it over with the record next: the
// enforcements both have (those pred lacks were never its; those next lacks were uninstalled
// with the takeover), marked HandedOverTo cid; nil when none is left.
func handedOver(pred, next *pairState, cid string) *pairState {
	kept := pred.clone()
	kept.handOverTo(cid)
	kept.Enforcements = slices.DeleteFunc(kept.Enforcements, func(st *enfState) bool { return next.Enforcements.get(st.Name) == nil })
	if len(kept.Enforcements) == 0 {
		return nil
	}
	return kept
}

// uninstallRemovedWhileWaiting uninstalls from a pair of the rule's old source, waiting for its
// handover, the enforcements the rule no longer renders for its cluster (EnforcementRemoved:
// explicit intent is immediate), and keeps the others as they are. A template error keeps all.
func (e *engine) uninstallRemovedWhileWaiting(r *ruleState, cid string, rec *clusterRecord, old *pairState, ch *change, cv *clusterVars) {
	renderKey := r.renderKey(cv)
	enfs, ok, err := r.rendered(cid, renderKey, cv, ch)
	if !ok || err != nil {
		return // not rendered yet (made outside the mutex, then evaluated again), or the pair
		// keeps what it has and the new source's cluster reports the template
	}
	rendered := make(map[string]bool, len(enfs))
	for _, en := range enfs {
		rendered[en.Name] = true
	}
	next := old.clone()
	removed := &pairState{}
	for _, st := range old.Enforcements {
		if !rendered[st.Name] {
			removed.Enforcements.put(st)
			next.Enforcements.remove(st.Name)
		}
	}
	if len(removed.Enforcements) == 0 {
		return
	}
	ch.intents = append(ch.intents, uninstalls(r.ref, old.Cluster.Value(), removed, events.UninstallEnforcementRemoved, r.deletionPolicy)...)
	if len(next.Enforcements) == 0 {
		next = nil
	}
	ch.pairs = append(ch.pairs, pairUpdate{rule: r.key, cid: cid, next: next})
}

// uninstallMissing drops the pair of a cluster that is gone (goneRevision: ClusterGone, the
// target marked gone), orphaning what it had. A pair whose cluster is merely not in the view
// (goneRevision 0) keeps what it has: only the source's ClusterGone says a cluster is gone. The
// view can lack a cluster whose pair exists when the engine stopped between deciding for the
// cluster's event and recording the cluster, or when the state bucket was lost; the event comes
// again (or the scanner announces the cluster again) and completes the view. r may be nil; the
// pair's own rule reference is used then.
func uninstallMissing(r *ruleState, rule, cid string, old *pairState, goneRevision uint64, ch *change) {
	if old == nil || goneRevision == 0 {
		return // nothing was installed here, or the cluster is not known to be gone
	}
	target := old.Cluster.Value()
	target.Gone, target.Revision = true, max(goneRevision, target.Revision)
	reason := events.UninstallClusterGone
	ref := old.Rule.Value()
	if r != nil {
		ref = r.ref
	}
	ch.intents = append(ch.intents, uninstalls(ref, target, old, reason, events.DeletionOrphan)...)
	ch.pairs = append(ch.pairs, pairUpdate{rule: rule, cid: cid})
}

// uninstallUnselected drops the pair of a cluster the rule no longer selects, under the rule's
// deletion policy.
func uninstallUnselected(r *ruleState, rule, cid string, rec *clusterRecord, old *pairState, ch *change) {
	if old == nil {
		return
	}
	span := unselectedSpan{cid: cid, pair: len(ch.pairs), from: len(ch.intents)}
	ch.intents = append(ch.intents, uninstalls(r.ref, targetOf(rec), old, events.UninstallNoLongerMatches, r.deletionPolicy)...)
	ch.pairs = append(ch.pairs, pairUpdate{rule: rule, cid: cid})
	span.to = len(ch.intents)
	ch.unselected = append(ch.unselected, span)
}

// evalSelected diffs the rule's render for a selected and eligible cluster against what the
// pair has. Evaluation runs under the engine's mutex and never renders: a render not in
// ch.renders yet is asked for (ch.renders.need) and made outside the mutex (see
// engine.evaluate). A template error touches only this pair: it keeps what it has.
func (e *engine) evalSelected(r *ruleState, rule, cid string, rec *clusterRecord, old *pairState, ch *change, cv *clusterVars) {
	renderKey := r.renderKey(cv)
	if old != nil && old.RenderKey == renderKey && old.grant() == r.grantFingerprint() {
		if t := old.Cluster.Value(); t.URL == rec.Cluster.URL && t.Source == credentialsRef(r.sel.source, rec.Cluster.Source) {
			return // nothing changed since the last render, nor the credentials' Secret, nor the grant
		}
	}
	enfs, ok, err := r.rendered(cid, renderKey, cv, ch)
	if !ok {
		return // rendered outside the mutex, then evaluated again
	}
	if err != nil {
		r.renderError(cid, rec.Cluster.Name, err)
		return
	}
	r.clearRenderError(cid)
	next, intents := r.diffPair(rec, old, renderKey, enfs)
	ch.intents = append(ch.intents, intents...)
	ch.pairs = append(ch.pairs, pairUpdate{rule: rule, cid: cid, next: next})
}

// rendered returns the rule's render for a cluster: the static one of a rule without templates,
// else the one in ch.renders. One not made yet is asked for (ch.renders.need) and ok is false:
// the caller decides nothing for the pair in this evaluation.
func (r *ruleState) rendered(cid, renderKey string, cv *clusterVars, ch *change) (enfs []events.Enforcement, ok bool, err error) {
	if !r.compiled.templated {
		return r.static, true, r.staticErr
	}
	out, done := ch.renders.done[renderKey]
	if done && out.err == nil && r.grant != nil {
		// Templates may render any repository or namespace: the grant judges what came out.
		return out.enfs, true, r.grant.permitsEnforcements(out.enfs)
	}
	if !done {
		ch.renders.need = append(ch.renders.need, renderJob{key: renderKey, failureKey: r.renderPrefix + failureToken(cid),
			rule: r.key, cluster: cv.rec.Cluster.Name, compiled: r.compiled, vars: deepCopy(cv.variables()).(map[string]any)})
		return nil, false, nil
	}
	return out.enfs, true, out.err
}

// renderKey returns the key of the rule's render for the cluster of cv, which changes whenever
// the render can.
func (r *ruleState) renderKey(cv *clusterVars) string {
	if !r.compiled.templated {
		return r.staticKey
	}
	return r.renderPrefix + cv.varsHash()
}

// credentialsRef is the Secret reference an intent carries for a cluster of the rule's source.
// The rule defines the source's Secret; a cluster whose source names a Secret of its own (a
// static cluster's `secretName`, which the scanner sends as the cluster's source.secretName)
// keeps that one, so argo-syncer registers it with its own credentials rather than the
// source's. The source id is the rule's either way.
func credentialsRef(rule, cluster events.SourceRef) events.SourceRef {
	ref := rule
	if cluster.SecretName != "" {
		ref.SecretName = cluster.SecretName
		if cluster.SecretNamespace != "" {
			ref.SecretNamespace = cluster.SecretNamespace
		}
	}
	return ref
}

// diffPair returns the pair's next record for a render, and the intents that take the cluster
// there: installs of what is new or changed, in render order, then uninstalls of what the
// render no longer has (EnforcementRemoved), in name order.
//
// Enforcements are identified by their rendered name (the Application is named after it), so a
// template that renames an enforcement is an install of the new name and an uninstall of the
// old one.
func (r *ruleState) diffPair(rec *clusterRecord, old *pairState, renderKey string, enfs []events.Enforcement) (*pairState, []events.Event) {
	return r.diffPairs(rec, old, renderKey, enfs, false, "")
}

// diffPairFor is diffPair for a handover: old is the pair of the old source the cluster takes
// over, and every enforcement gets an install intent for the new target, unchanged or not (its
// source and identity changed), which replaces the identity replaces ("" when it is the same).
func (r *ruleState) diffPairFor(rec *clusterRecord, old *pairState, renderKey string, enfs []events.Enforcement, replaces string) (*pairState, []events.Event) {
	return r.diffPairs(rec, old, renderKey, enfs, true, replaces)
}

// diffPairs does the work of diffPair and diffPairFor: with handover set, the unchanged
// enforcements get an install intent too, and the intents' target replaces the identity replaces.
// A changed credentials reference (a static cluster's own secretName) sends them all again too:
// the intents carry the new Secret, and argo-syncer refreshes the cluster Secret's credentials
// from it (its Applications are unchanged, so nothing else is written and no trigger fires).
func (r *ruleState) diffPairs(rec *clusterRecord, old *pairState, renderKey string, enfs []events.Enforcement, handover bool, replaces string) (*pairState, []events.Event) {
	target := targetOf(rec)
	target.Source = credentialsRef(r.sel.source, rec.Cluster.Source)
	resend := handover || (old != nil && old.Cluster.Value().Source != target.Source)
	// The record is the new cluster's own; only the intents replace.
	next := &pairState{Rule: share(r.ref), Cluster: shareTarget(target), RenderKey: renderKey, Enforcements: make(enfStates, 0, len(enfs)),
		terms: share(pairTerms{deletionPolicy: r.deletionPolicy, grant: r.grantFingerprint(), specGeneration: r.specGeneration})}
	target.Replaces = replaces
	var intents []events.Event
	for i := range enfs {
		en := &enfs[i]
		hash := r.specHashFor(en, rec.Cluster.URL)
		if prev := oldEnf(old, en.Name); prev != nil && prev.SpecHash == hash && !resend {
			// Unchanged: keep its intent id and outcomes; the new generation needs no intent.
			cp := *prev
			next.Enforcements.put(&cp)
			continue
		}
		intent := &events.InstallIntent{Rule: r.ref, Cluster: withRegistration(target, &rec.Cluster), Enforcement: *en, SpecHash: hash,
			Triggers: r.triggers, DeletionPolicy: r.deletionPolicy, Grant: r.grantEvent()}
		intents = append(intents, intent)
		id := intent.ID()
		st := &enfState{Name: en.Name, SpecHash: strings.Clone(hash)}
		st.setIntent(id)
		next.Enforcements.put(st)
	}
	if old != nil {
		intents = append(intents, uninstalls(r.ref, target, removedFrom(old, next), events.UninstallEnforcementRemoved, r.deletionPolicy)...)
	}
	return next, intents
}

// oldEnf is the state of the named enforcement in p, or nil (no pair, or not in it).
func oldEnf(p *pairState, name string) *enfState {
	if p == nil {
		return nil
	}
	return p.Enforcements.get(name)
}

// removedFrom is a pair holding the enforcements of old that next no longer has.
func removedFrom(old, next *pairState) *pairState {
	removed := &pairState{}
	for _, st := range old.Enforcements {
		if next.Enforcements.get(st.Name) == nil {
			removed.Enforcements.put(st)
		}
	}
	return removed
}

// uninstalls returns one uninstall intent per enforcement of the pair, in name order. A gone
// target, or no policy, always orphans.
func uninstalls(ref events.RuleRef, target events.Target, p *pairState, reason, policy string) []events.Event {
	if policy == "" || target.Gone {
		policy = events.DeletionOrphan
	}
	var out []events.Event
	for _, name := range p.Enforcements.names() {
		out = append(out, &events.UninstallIntent{Rule: ref, Cluster: target, Enforcement: name, Reason: reason, DeletionPolicy: policy})
	}
	return out
}
