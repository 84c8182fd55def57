package main

// The rule edit breaker. A typo in a rule's labels, ignore list or filters changes what it
// selects, and every pair it stops selecting would be uninstalled at once under the rule's
// deletion policy (Cascade deletes the workloads), then reinstalled, triggers and all, when the
// typo is fixed. The scanner's removal breaker never sees that. So the selection removals of one
// rule generation (NoLongerMatches produced by applyRule) go through a breaker of the scanner's
// size: max(1, MAX_REMOVAL_FRACTION × the rule's installed pairs). Over the cap, all of them are
// held: the pairs keep what they have and the rule shows RemovalsHeld. A later generation that
// selects them again drops the hold (nothing was removed, so nothing is reinstalled). The hold of
// generation n is released by the annotation ReleaseAnnotation with the value "generation/<n>"
// on a rule in OPERATOR_NAMESPACE, or by the rule removals released event (`enforcement
// release-removals <namespace>/<name> generation/<n>`). Removed enforcements, a deleted rule and
// clusters that went away are not selection removals and stay immediate.

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
)

// ReleaseAnnotation releases the selection removals a rule edit held; its value is
// "generation/<n>", the generation that held them. It is the annotation source-scanner reads
// for its own trips ("<source id>/<scan>"), whose values never begin with "generation/".
const ReleaseAnnotation = "enforcement.globo.com/release-removals"

// releasePrefix begins the value of a release of a rule generation's hold.
const releasePrefix = "generation/"

// heldNames is how many cluster names the RemovalsHeld message gives.
const heldNames = 3

// heldRemovals is the hold of one rule generation's selection removals, stored under
// "held.<rule>" in the state bucket.
type heldRemovals struct {
	Generation int64 `json:"generation"`
	// Installed is how many pairs the rule had when the generation came; Cap the breaker's size.
	Installed int `json:"installed"`
	Cap       int `json:"cap"`
	// Clusters are the held clusters: cluster id -> name.
	Clusters map[string]string `json:"clusters"`
}

// removalCap is the breaker's size: at most this many selection removals go through at once.
func removalCap(installed int, fraction float64) int {
	return max(1, int(math.Floor(fraction*float64(installed))))
}

// readRelease reads a rule's release annotation: the generation it releases, or 0. A release
// on a rule outside OPERATOR_NAMESPACE, or a value of another shape, is not one (with the reason
// why, for the log); a scanner trip's value is not ours and says nothing.
func readRelease(cr *v1beta1.ClusterRule, operatorNamespace string) (int64, error) {
	v, ok := cr.Annotations[ReleaseAnnotation]
	if !ok || !strings.HasPrefix(v, releasePrefix) {
		return 0, nil
	}
	g, err := strconv.ParseInt(strings.TrimPrefix(v, releasePrefix), 10, 64)
	if err != nil || g <= 0 {
		return 0, fmt.Errorf("annotation %s=%q: want generation/<n>, n the generation that held the removals", ReleaseAnnotation, v)
	}
	if cr.Namespace != operatorNamespace {
		return 0, fmt.Errorf("annotation %s=%q: releases are accepted only on rules in OPERATOR_NAMESPACE %s", ReleaseAnnotation, v, operatorNamespace)
	}
	return g, nil
}

// releasing reports whether r releases the hold its own generation placed.
func (e *engine) releasing(r *ruleState) bool {
	h := e.held[r.key]
	return h != nil && r.release == h.Generation && h.Generation == r.ref.Generation
}

// breakRemovals passes a rule generation's change through the breaker. prev is the hold the
// rule had before this evaluation. Under the cap, or released, the change goes through as it is
// and the result is nil; over the cap the selection removals are taken out of ch and the hold
// is returned.
func (e *engine) breakRemovals(r *ruleState, ch *change, prev *heldRemovals) *heldRemovals {
	installed := e.livePairs(r.key)
	limit := removalCap(installed, e.maxRemovalFraction)
	if len(ch.unselected) <= limit {
		return nil
	}
	if prev != nil && prev.Generation == r.ref.Generation && r.release == prev.Generation {
		e.log.Info("Released held removals", "rule", r.key, "generation", r.ref.Generation, "removals", len(ch.unselected))
		return nil
	}
	h := &heldRemovals{Generation: r.ref.Generation, Installed: installed, Cap: limit, Clusters: map[string]string{}}
	for _, u := range ch.unselected {
		h.Clusters[u.cid] = e.pairs[r.key][u.cid].Cluster.Value().Name
	}
	ch.dropUnselected()
	if prev == nil || prev.Generation != h.Generation {
		e.log.Warn("Held the removals of a rule edit", "rule", r.key, "generation", h.Generation,
			"removals", len(h.Clusters), "installed", installed, "cap", limit)
	}
	return h
}

// isHeld reports whether the rule's removal of the cluster is held.
func (e *engine) isHeld(rule, cid string) bool {
	h := e.held[rule]
	return h != nil && h.Clusters[cid] != ""
}

// setHeld stores (nil: deletes) a rule's hold, then applies it in memory.
func (e *engine) setHeld(ctx context.Context, rule string, h *heldRemovals) error {
	if h == nil && e.held[rule] == nil {
		return nil
	}
	if err := e.store.putHeld(ctx, rule, h); err != nil {
		return fmt.Errorf("store held removals: %w", err)
	}
	if h == nil {
		delete(e.held, rule)
	} else {
		e.held[rule] = h
	}
	e.countHeld()
	return nil
}

// countHeld sets the removals_held gauge from the holds.
func (e *engine) countHeld() {
	n := 0
	for _, h := range e.held {
		n += len(h.Clusters)
	}
	e.metrics.removalsHeld.Set(float64(n))
}

// heldMessage is the RemovalsHeld message of a rule edit's hold: counts, a few cluster names,
// and how to release.
func heldMessage(r *ruleState, h *heldRemovals) string {
	names := slices.Sorted(maps.Values(h.Clusters))
	shown := strings.Join(names[:min(len(names), heldNames)], ", ")
	if len(names) > heldNames {
		shown += fmt.Sprintf(" and %d more", len(names)-heldNames)
	}
	if r.tenant {
		// A narrowed or removed grant holds removals of clusters the rule may no longer
		// target; the status of a rule outside OPERATOR_NAMESPACE does not name them.
		shown = "cluster names are not shown for a rule outside " + r.operatorNamespace
	}
	release := fmt.Sprintf("release them with enforcement release-removals %s/%s %s%d", r.ref.Namespace, r.ref.Name, releasePrefix, h.Generation)
	if r.ref.Namespace == r.operatorNamespace {
		release += fmt.Sprintf(" or the annotation %s: %s%d on this rule", ReleaseAnnotation, releasePrefix, h.Generation)
	} else {
		release += fmt.Sprintf(" (the annotation counts only on rules in %s)", r.operatorNamespace)
	}
	return fmt.Sprintf("generation %d no longer selects %d of the %d cluster(s) the rule installed (breaker cap %d, MAX_REMOVAL_FRACTION): %s; "+
		"they keep what they have: revert the edit, or %s", h.Generation, len(h.Clusters), h.Installed, h.Cap, shown, release)
}

// releaseRule releases the hold a RuleRemovalsReleased event names (`enforcement
// release-removals <namespace>/<name> generation/<n>`): only when that generation is still the
// rule's and still holds removals; anything else releases nothing and is logged.
func (e *engine) releaseRule(ctx context.Context, ev *events.RuleRemovalsReleased) error {
	key := ev.Rule.Namespace + "/" + ev.Rule.Name
	logged := false
	return e.evaluate(ctx, func(rs *renders) error {
		h, r := e.held[key], e.rules[key]
		if h == nil || r == nil || h.Generation != ev.Rule.Generation || r.ref.Generation != h.Generation {
			e.log.Warn("Ignored release: the rule generation holds no removals", "rule", key, "generation", ev.Rule.Generation, "by", ev.By)
			return nil
		}
		if !logged {
			e.log.Info("Releasing held removals", "rule", key, "generation", h.Generation, "by", ev.By)
			logged = true
		}
		annotated := r.release
		r.release = h.Generation
		err := e.evalAndCommit(ctx, r, rs)
		r.release = annotated
		if err != nil {
			return fmt.Errorf("rule %s: %w", key, err)
		}
		if len(rs.need) == 0 {
			e.notify(key)
		}
		return nil
	})
}
