package main

// Rules. A ClusterRule is compiled once per generation (selection, enforcements, triggers,
// deletion policy) into a ruleState; applying it evaluates the rule over the clusters of its
// source and the pairs it already holds, and deleting it uninstalls every pair it holds.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
)

// ruleState is one compiled ClusterRule.
type ruleState struct {
	key            string // namespace/name
	ref            events.RuleRef
	sel            *selection
	invalid        error // the spec cannot be used; existing pairs are kept as they are
	compiled       *compiledRule
	triggers       *events.Triggers
	deletionPolicy string
	// renderPrefix is "<uid>.<generation>.", the rule part of render cache keys; staticKey is
	// the render key of a rule without templates, the same string for all its pairs.
	renderPrefix, staticKey string
	// static is the render of a rule without templates (the same for every cluster).
	static    []events.Enforcement
	staticErr error
	// templateErrors are the pairs whose render failed, by cluster id: cluster name and message.
	templateErrors map[string][2]string
	// operatorNamespace is OPERATOR_NAMESPACE; release is the generation whose held removals
	// the rule's release annotation releases (0: none), releaseErr why an annotation is not one.
	operatorNamespace string
	release           int64
	releaseErr        error
	// tenant is set for a rule outside OPERATOR_NAMESPACE (tenancy.go): it acts under grant, or,
	// when denied says why it may not, selects nothing. grantKey changes whenever the grant
	// does (or the reason of a denial), so that the same generation is evaluated again.
	// deniedRenders are the pairs whose render the grant does not allow, as templateErrors.
	tenant        bool
	grant         *grantState
	grantKey      string
	denied        error
	deniedRenders map[string][2]string
	// spec is the rule's spec, kept for the staged rollout (rollout.go): when the rule's next
	// generation rolls out, this one is the stable generation the clusters not reached keep.
	// rollout is spec.rollout compiled; nil without one.
	spec    *v1beta1.ClusterRuleSpec
	rollout *rolloutSpec
	// specGeneration is set on a rollout's stable generation (rollout.go): the generation of
	// its spec, while ref names the rule's generation that decides, so its intents are new
	// decisions (new ids) of the rule as it is.
	specGeneration int64
	// matched is what the status last counted of the clusters the rule selects (matchedClusters).
	matched *matchedView
}

// ruleFromSpec compiles a ClusterRule. secretNamespace is OPERATOR_NAMESPACE.
func ruleFromSpec(cr *v1beta1.ClusterRule, secretNamespace string) *ruleState {
	r := &ruleState{
		key:            cr.Namespace + "/" + cr.Name,
		ref:            events.RuleRef{Namespace: cr.Namespace, Name: cr.Name, UID: string(cr.UID), Generation: cr.Generation},
		deletionPolicy: cr.Spec.DeletionPolicy,
		templateErrors: map[string][2]string{},
		deniedRenders:  map[string][2]string{},

		operatorNamespace: secretNamespace,
	}
	r.release, r.releaseErr = readRelease(cr, secretNamespace)
	if r.deletionPolicy == "" {
		r.deletionPolicy = events.DeletionOrphan
	}
	r.renderPrefix = string(cr.UID) + "." + strconv.FormatInt(cr.Generation, 10) + "."
	r.staticKey = r.renderPrefix + "static"
	r.sel, r.invalid = compileSelection(cr.Spec.Source, secretNamespace)
	if r.invalid == nil && len(cr.Spec.Enforcements) == 0 {
		r.invalid = errors.New("spec.enforcements: at least one enforcement is required")
	}
	r.spec = cr.Spec.DeepCopy()
	if ro, err := compileRollout(cr); err != nil && r.invalid == nil {
		r.invalid = err
	} else {
		r.rollout = ro
	}
	r.compiled = compile(cr.Spec.Enforcements)
	if !r.compiled.templated {
		r.static, r.staticErr = (&Renderer{}).render(context.Background(), r.compiled, nil)
		if r.staticErr != nil && r.invalid == nil {
			r.invalid = r.staticErr
		}
	}
	if t := cr.Spec.Triggers; t != nil && (t.BeforeInstall != nil || t.AfterInstall != nil) {
		r.triggers = &events.Triggers{BeforeInstall: trigger(t.BeforeInstall), AfterInstall: trigger(t.AfterInstall)}
	}
	return r
}

// trigger is a rule's trigger as intents carry it, with the original's defaults filled in. Its
// endpoint is redacted (events.RedactURL): a token in the URL's user information or query never
// enters the stream; trigger-dispatcher reads the full endpoint from the rule when it delivers.
func trigger(t *v1beta1.Trigger) *events.Trigger {
	if t == nil {
		return nil
	}
	out := &events.Trigger{Endpoint: events.RedactURL(t.Endpoint), TimeoutSeconds: int(t.Timeout), FailurePolicy: t.FailurePolicy, SigningSecret: t.SigningSecret}
	out.EndpointRedacted = out.Endpoint != events.InvalidURL && events.URLHasCredentials(t.Endpoint)
	if out.TimeoutSeconds == 0 {
		out.TimeoutSeconds = 5 // the original's default
	}
	if out.FailurePolicy == "" {
		out.FailurePolicy = "Ignore"
	}
	return out
}

// applyRule evaluates a new or changed rule against its clusters. The same uid and generation
// as the rule already known is a no-op, so status-only reconciles cost nothing, unless the rule
// now releases the removals its generation held. Renders are made outside the mutex
// (engine.evaluate).
func (e *engine) applyRule(ctx context.Context, r *ruleState) error {
	warned := false
	return e.evaluate(ctx, func(rs *renders) error {
		old := e.rules[r.key]
		if r.releaseErr != nil && !warned && (old == nil || old.releaseErr == nil || old.releaseErr.Error() != r.releaseErr.Error()) {
			e.log.Warn("Ignored release annotation", "rule", r.key, "error", r.releaseErr)
			warned = true
		}
		if old != nil && old.ref.UID == r.ref.UID && old.ref.Generation == r.ref.Generation && old.grantKey == r.grantKey && !e.releasing(r) {
			old.release, old.releaseErr = r.release, r.releaseErr
			if old.rollout != nil && r.rollout != nil {
				old.rollout.approvals = r.rollout.approvals // the approval annotation changes no generation
			}
			return nil
		}
		if r.denied != nil && (old == nil || old.grantKey != r.grantKey) {
			e.log.Warn("Rule is not permitted; it selects no cluster", "rule", r.key, "error", r.denied)
		}
		if r.invalid != nil {
			e.log.Warn("Rule spec is invalid; its clusters keep what they have", "rule", r.key, "error", r.invalid)
			e.indexRule(r)
			e.notify(r.key)
			//nolint:nilerr // an invalid spec is the rule's state (its status says so), not a failure to retry
			return nil
		}
		if err := e.beginRollout(ctx, r, old); err != nil {
			return fmt.Errorf("rule %s: %w", r.key, err)
		}
		if err := e.evalAndCommit(ctx, r, rs); err != nil || len(rs.need) > 0 {
			if err != nil {
				return fmt.Errorf("rule %s: %w", r.key, err)
			}
			return nil // rendered outside the mutex, then evaluated again
		}
		e.indexRule(r)
		e.notify(r.key)
		if r.compiled.templated {
			e.purgeRendersLater(r.ref.UID, e.oldestLiveGeneration(r))
		}
		return nil
	})
}

// evalAndCommit evaluates the rule over its clusters afresh (its earlier hold aside), passes the
// selection removals through the rule edit breaker and commits. A hold is stored before the
// change that leaves its removals out, and dropped only after the change that carries them (or
// no longer needs them) is committed, so a crash in between evaluates the same again. When the
// evaluation lacks renders (rs.need), nothing is changed or committed.
func (e *engine) evalAndCommit(ctx context.Context, r *ruleState, rs *renders) error {
	prev := e.held[r.key]
	delete(e.held, r.key)
	ch := e.evalRule(r, rs)
	if prev != nil {
		e.held[r.key] = prev
	}
	if len(rs.need) > 0 {
		return nil
	}
	h := e.breakRemovals(r, ch, prev)
	if h != nil {
		if err := e.setHeld(ctx, r.key, h); err != nil {
			return err
		}
	}
	if err := e.commit(ctx, ch); err != nil {
		return err
	}
	if h == nil {
		return e.setHeld(ctx, r.key, nil)
	}
	return nil
}

// evalRule evaluates a rule over its clusters: those of its source, plus those it holds pairs
// for (which may be of the source it had before this change).
func (e *engine) evalRule(r *ruleState, rs *renders) *change {
	ch := &change{renders: rs}
	seen := map[string]bool{}
	for cid := range e.bySource[r.sel.source.ID] {
		seen[cid] = true
		e.evalPair(r, r.key, cid, e.clusters[cid], 0, ch)
	}
	for cid := range e.pairs[r.key] {
		if !seen[cid] {
			// A cluster of another source (the rule's source changed) or one no longer known.
			e.evalPair(r, r.key, cid, e.clusters[cid], 0, ch)
		}
	}
	return ch
}

// purgeRendersLater drops the render cache entries of a rule's older generations (all of them
// when generation is 0) in the background: they can never be read again, and the cache bucket
// has no TTL. Failing only leaves garbage behind.
func (e *engine) purgeRendersLater(uid string, generation int64) {
	if uid == "" {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.store.purgeRenders(ctx, uid, generation); err != nil {
			e.log.Warn("Old renders not purged", "uid", uid, "error", err)
		}
	}()
}

// deleteRule uninstalls every pair of the rule (reason RuleDeleted) and forgets it. ref is the
// rule as last seen; with a zero ref the stored pairs' own rule reference is used.
func (e *engine) deleteRule(ctx context.Context, key string, ref events.RuleRef, deletionPolicy string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch, uids := e.ruleDeletion(key, ref, deletionPolicy)
	if err := e.commit(ctx, ch); err != nil {
		return fmt.Errorf("rule %s: %w", key, err)
	}
	if err := e.setHeld(ctx, key, nil); err != nil {
		return fmt.Errorf("rule %s: %w", key, err)
	}
	if err := e.forgetRollout(ctx, key); err != nil {
		return fmt.Errorf("rule %s: %w", key, err)
	}
	if old := e.rules[key]; old != nil {
		uids[old.ref.UID] = true
		if old.sel != nil {
			delete(e.rulesBySource[old.sel.source.ID], key)
		}
	}
	for uid := range uids {
		e.purgeRendersLater(uid, 0)
	}
	delete(e.rules, key)
	e.metrics.rules.Set(float64(len(e.rules)))
	return nil
}

// ruleDeletion is the change that uninstalls every pair of a deleted rule, and the rule uids
// those pairs were installed under (whose renders are to be purged).
func (e *engine) ruleDeletion(key string, ref events.RuleRef, deletionPolicy string) (*change, map[string]bool) {
	ch := &change{}
	uids := map[string]bool{}
	for cid, p := range e.pairs[key] {
		installedRule, installed := p.Rule.Value(), p.Cluster.Value()
		uids[installedRule.UID] = true
		rr, policy := ref, deletionPolicy
		if rr.Name == "" {
			rr, policy = installedRule, p.deletionPolicy()
		}
		target := installed
		if rec := e.clusters[cid]; rec != nil {
			target = targetOf(rec)
			target.Source = installed.Source // the rule's Secret reference, as installed
		}
		ch.intents = append(ch.intents, uninstalls(rr, target, p, events.UninstallRuleDeleted, policy)...)
		ch.pairs = append(ch.pairs, pairUpdate{rule: key, cid: cid})
	}
	return ch, uids
}

// ruleKeysWithPairs lists the rules the engine holds install records for.
func (e *engine) ruleKeysWithPairs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Sorted(maps.Keys(e.pairs))
}
