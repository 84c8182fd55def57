package main

// Source handover. A rule edit can change the rule's source, not only what it selects: a changed
// secretName, a renamed static ConfigMap, an added EKS region give the rule a new source id, and
// the clusters it had are then clusters of another source. Letting them go at once would
// uninstall every pair (Cascade: delete the workloads) before the new source has listed anything,
// then reinstall them, triggers and all. So a change of source is a handover:
//
//   - While the new source has not produced a complete listing (no SourceListed yet, or fewer of
//     its clusters seen than that listing announced) or is degraded, the pairs of the old source
//     keep what they have (the rule's Ready condition says SourceHandover), and a cluster of the
//     new source whose name one of them holds waits too. Installs on other clusters go ahead.
//   - After it, a cluster of the new source with the name an old-source pair holds takes that
//     pair over: the new cluster gets a record of its own, and every enforcement is sent again as
//     an install intent for the new target, with Target.Replaces naming the old identity when it
//     changed, so argo-syncer updates the same Applications, AppProject and cluster Secret in
//     place (no uninstall, no delete, no beforeInstall: the Application exists). The old pair's
//     record stays, marked HandedOverTo the new cluster, until argo-syncer confirms each
//     enforcement (install.succeeded of the new pair: confirmTakeover drops it from the old
//     record). argo-syncer may refuse the takeover (NameConflict: another rule still installs
//     on the old identity); the old pair then stays known, so nothing is orphaned: it is
//     uninstalled when the rule is deleted, and goes as a selection removal (the rule edit
//     breaker) once no cluster of the new source has its name any more.
//   - The old-source pairs the new source does not produce are selection removals like any
//     other: they go through the rule edit breaker (breaker.go).
//
// Removed enforcements and a deleted rule stay immediate, as they are not selection removals.
// The listings are stored under "listed.<source id>" (see store.go), so a restart keeps them.

import (
	"context"
	"fmt"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// listing is the last SourceListed of a source: its scan and how many clusters it had, and
// whether the engine has seen that many of the source's clusters since a listing (complete
// stays true: a source that shrinks later was still listed completely).
type listing struct {
	Scan     uint64 `json:"scan"`
	Known    int    `json:"known"`
	Complete bool   `json:"complete,omitempty"`
}

// applyListed records a source's complete listing (stored first); applyOutcome then completes the handovers
// that waited for it. An older scan's announcement changes nothing.
func (e *engine) applyListed(ctx context.Context, l *events.SourceListed) error {
	if prev := e.listed[l.Source.ID]; prev != nil && prev.Scan >= l.Scan {
		return nil
	}
	rec := &listing{Scan: l.Scan, Known: l.Known, Complete: len(e.bySource[l.Source.ID]) >= l.Known}
	if prev := e.listed[l.Source.ID]; prev != nil && prev.Complete {
		rec.Complete = true
	}
	if err := e.store.putListed(ctx, l.Source.ID, rec); err != nil {
		return fmt.Errorf("store source listing: %w", err)
	}
	e.listed[l.Source.ID] = rec
	e.notifySource(l.Source.ID)
	return nil // applyOutcome completes the handovers, outside the mutex
}

// handoverWaits reports whether a rule whose source is sourceID still waits before letting go
// of its old source's clusters: the source has not listed completely yet, its clusters'
// events are still coming in, or it is degraded.
func (e *engine) handoverWaits(sourceID string) bool {
	if !e.sourceListed(sourceID) {
		return true
	}
	deg, _ := e.activeDegradation(sourceID)
	return deg != nil
}

// sourceListed reports whether the source has listed completely and every cluster of that
// listing has reached the engine: until then, which of its clusters a selector picks is not known.
func (e *engine) sourceListed(sourceID string) bool {
	l := e.listed[sourceID]
	return l != nil && (l.Complete || len(e.bySource[sourceID]) >= l.Known)
}

// noteListingComplete stores that a source's listing is complete once the last of its clusters
// has reached the engine, so that clusters removed later do not make the source look unlisted
// again. It reports whether the listing became complete now. Call it with e.mu held.
func (e *engine) noteListingComplete(ctx context.Context, sourceID string) (bool, error) {
	l := e.listed[sourceID]
	if l == nil || l.Complete || len(e.bySource[sourceID]) < l.Known {
		return false, nil
	}
	done := *l
	done.Complete = true
	if err := e.store.putListed(ctx, sourceID, &done); err != nil {
		return false, fmt.Errorf("store source listing: %w", err)
	}
	e.listed[sourceID] = &done
	return true, nil
}

// listingMessage says how far a source's listing has come, for a status message.
func (e *engine) listingMessage(sourceID string) string {
	if l := e.listed[sourceID]; l != nil {
		return fmt.Sprintf("listed %d cluster(s), %d seen so far", l.Known, len(e.bySource[sourceID]))
	}
	return "has not listed completely yet"
}

// foreignPair reports whether p is a pair the rule holds from a source other than its current
// one: what a handover moves or lets go.
func foreignPair(r *ruleState, p *pairState) bool {
	return p != nil && p.Cluster.Value().Source.ID != r.sel.source.ID
}

// foreignPairs counts the pairs of the rule from another source than its current one.
func (e *engine) foreignPairs(r *ruleState) int {
	n := 0
	for _, p := range e.pairs[r.key] {
		if foreignPair(r, p) {
			n++
		}
	}
	return n
}

// predecessor is the pair of the rule's old source that cluster cid of the new source (rec)
// takes over, because its cluster has the same name, and its cluster id; "" when there is none.
// Old sources may hold several pairs of one name (two old sources, or two clusters of one name
// and another identity each): the one of the same identity comes first, then one whose
// Applications are installed (the one argo-syncer's objects record), then one not handed over
// yet, then the lowest cluster id. A pair already handed over to another cluster that still
// holds its pair is that cluster's, so it is not taken twice.
func (e *engine) predecessor(r *ruleState, cid string, rec *clusterRecord) (string, *pairState) {
	best, bestRank := "", -1
	for _, pcid := range e.pairsNamed(r.key, rec.Cluster.Name) {
		p := e.pairs[r.key][pcid]
		if pcid == cid || !foreignPair(r, p) {
			continue
		}
		if to := p.handedOverTo(); to != "" && to != cid && e.pairs[r.key][to] != nil {
			continue
		}
		rank := 0
		if id := p.Cluster.Value().Identity; id != "" && id == rec.Cluster.Identity {
			rank += 4
		}
		if p.installed() {
			rank += 2
		}
		if p.handedOverTo() == "" {
			rank++
		}
		if rank > bestRank { // ids are sorted: the lowest wins a tie
			best, bestRank = pcid, rank
		}
	}
	if best == "" {
		return "", nil
	}
	return best, e.pairs[r.key][best]
}

// installed reports whether argo-syncer confirmed any enforcement of the pair.
func (p *pairState) installed() bool {
	for _, st := range p.Enforcements {
		if st.Installed {
			return true
		}
	}
	return false
}

// confirmTakeover drops enforcement name from the pairs of the rule's old sources that were
// handed over to cluster cid (HandedOverTo), now that argo-syncer confirmed cid's install of
// it: the Application of that name records cid's identity, and the old pair has nothing left
// there. A pair left with no enforcement is forgotten. Each record is stored before memory
// changes; a redelivered confirmation finds nothing more to drop.
func (e *engine) confirmTakeover(ctx context.Context, rule, cid, cluster, name string) error {
	for _, pcid := range e.pairsNamed(rule, cluster) {
		p := e.pairs[rule][pcid]
		if pcid == cid || p.handedOverTo() != cid || p.Enforcements.get(name) == nil {
			continue
		}
		next := p.clone()
		next.Enforcements.remove(name)
		var err error
		if len(next.Enforcements) == 0 {
			next, err = nil, e.store.deletePair(ctx, rule, pcid)
		} else {
			err = e.store.putPair(ctx, rule, pcid, next)
		}
		if err != nil {
			return fmt.Errorf("store handed over pair: %w", err)
		}
		e.setPair(rule, pcid, next)
		e.log.Info("Takeover confirmed: the old source's pair lets go of the Application", "rule", rule, "cluster", cluster,
			"enforcement", name, "from", p.Cluster.Value().Identity, "pairLeft", next != nil)
	}
	return nil
}

// livePairs counts the rule's pairs that are not handed over to a cluster of its new source
// (those wait only for argo-syncer's confirmation and are the same clusters as their successors').
func (e *engine) livePairs(rule string) int {
	n := 0
	for _, p := range e.pairs[rule] {
		if p.handedOverTo() == "" {
			n++
		}
	}
	return n
}

// hasSuccessor reports whether the rule's new source has a cluster, selected by the rule, with
// the name of an old-source pair: that cluster takes the pair over (or, not eligible yet, keeps
// it waiting), so the pair is not removed. The names are computed once per change and rule.
func (e *engine) hasSuccessor(r *ruleState, name string, ch *change) bool {
	if ch.successors == nil {
		ch.successors = map[string]map[string]bool{}
	}
	names, ok := ch.successors[r.key]
	if !ok {
		names = map[string]bool{}
		for cid := range e.bySource[r.sel.source.ID] {
			if c := &e.clusters[cid].Cluster; r.sel.selects(c) {
				names[c.Name] = true
			}
		}
		ch.successors[r.key] = names
	}
	return names[name]
}

// completeHandovers evaluates again the rules of the source that still hold pairs of another
// source, once the source's listing allows their handover. Their removals go through the rule
// edit breaker like the edit's own. It takes the mutex itself (engine.evaluate: their renders
// are made outside it); a rule handed over before a step that needed renders holds no pair of
// another source any more, so the step's next run skips it.
func (e *engine) completeHandovers(ctx context.Context, sourceID string) error {
	return e.evaluate(ctx, func(rs *renders) error {
		if e.handoverWaits(sourceID) {
			return nil
		}
		for _, r := range e.rulesBySource[sourceID] {
			if r.invalid != nil || e.foreignPairs(r) == 0 {
				continue
			}
			e.log.Info("Handing over a rule's clusters to its new source", "rule", r.key, "source", sourceID, "kind", r.sel.source.Kind)
			if err := e.evalAndCommit(ctx, r, rs); err != nil {
				return fmt.Errorf("rule %s: hand over to source %s: %w", r.key, sourceID, err)
			}
			if len(rs.need) > 0 {
				return nil // rendered outside the mutex, then evaluated again
			}
			e.notify(r.key)
		}
		return nil
	})
}

// handoverMessage is the SourceHandover message of a rule that waits for its new source.
func (e *engine) handoverMessage(r *ruleState, waiting int) string {
	why := e.listingMessage(r.sel.source.ID)
	if deg, _ := e.activeDegradation(r.sel.source.ID); deg != nil {
		why = fmt.Sprintf("is degraded (%s: %s)", deg.reason, deg.message)
	}
	return fmt.Sprintf("the rule's source changed: the %d cluster(s) of its old source keep what they have until the new %s source %s, "+
		"then clusters listed under the same name are taken over in place and the others are let go", waiting, r.sel.source.Kind, why)
}
