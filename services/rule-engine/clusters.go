package main

// Clusters. The source-scanner's cluster events keep the engine's view of the clusters: an
// appeared or updated cluster is recorded and evaluated against the rules that can match it; a
// gone cluster has every pair uninstalled (orphaning) and is forgotten. The events' decision
// sequences (or, for records stored before those were kept, their inventory revisions) order
// them: a record older than the one known is a stale redelivery and is ignored
// (clusterRecord.newerThan).

import (
	"context"
	"fmt"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// applyCluster records an appeared or updated cluster and re-evaluates the rules that can match
// it. seq is the event's decision sequence (0 when unknown). A record older than the one known
// (a stale redelivery) is ignored. Renders are made outside the mutex (engine.evaluate).
func (e *engine) applyCluster(ctx context.Context, c events.Cluster, revision, seq uint64) error {
	cid := clusterID(c.Source.ID, c.Key)
	rec := &clusterRecord{Cluster: c, Revision: revision, Sequence: seq}
	handover := false
	err := e.evaluate(ctx, func(rs *renders) error {
		if e.clusters[cid].newerThan(revision, seq) {
			return nil
		}
		ch := e.evalCluster(cid, rec, rs)
		if len(rs.need) > 0 {
			return nil // rendered outside the mutex, then evaluated again
		}
		// The cluster is recorded before the decisions taken for it: a stop in between leaves
		// a view that the evaluation at the next start decides from again, never pairs of a
		// cluster the view lacks.
		if err := e.store.putCluster(ctx, cid, rec); err != nil {
			return fmt.Errorf("cluster %s: %w", c.Name, err)
		}
		if err := e.commit(ctx, ch); err != nil {
			return fmt.Errorf("cluster %s: %w", c.Name, err)
		}
		e.setCluster(cid, rec)
		for _, r := range e.rulesBySource[c.Source.ID] {
			e.notify(r.key)
		}
		// The last cluster event of a listing whose SourceListed came first completes the handovers.
		var err error
		handover, err = e.noteListingComplete(ctx, c.Source.ID)
		return err
	})
	if err != nil || !handover {
		return err
	}
	return e.completeHandovers(ctx, c.Source.ID)
}

// evalCluster evaluates a cluster's new record against the rules of its source, which decide
// whether it matches, and the rules of another source that still hold a pair for it (their
// source changed), which let it go. The cluster's variables are computed once for all of them.
func (e *engine) evalCluster(cid string, rec *clusterRecord, rs *renders) *change {
	src := rec.Cluster.Source.ID
	ch := &change{renders: rs}
	cv := &clusterVars{rec: rec}
	for _, r := range e.rulesBySource[src] {
		e.evalPairVars(r, r.key, cid, rec, 0, ch, cv)
	}
	for rule, m := range e.pairs {
		if _, ok := m[cid]; ok && e.rulesBySource[src][rule] == nil {
			e.evalPairVars(e.rules[rule], rule, cid, rec, 0, ch, cv)
		}
	}
	return ch
}

// applyClusterGone uninstalls every pair of a cluster its source no longer lists (reason
// ClusterGone, always orphaning: there is no cluster to delete resources from) and forgets it.
// seq is the event's decision sequence (0 when unknown).
func (e *engine) applyClusterGone(ctx context.Context, g *events.ClusterGone, seq uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	cid := clusterID(g.Source.ID, g.Key)
	if e.clusters[cid].newerThan(g.Revision, seq) {
		return nil // it came back after this event was written
	}
	ch := &change{}
	for rule, m := range e.pairs {
		if _, ok := m[cid]; ok {
			e.evalPair(e.rules[rule], rule, cid, nil, g.Revision, ch)
		}
	}
	if err := e.commit(ctx, ch); err != nil {
		return fmt.Errorf("cluster %s: %w", g.Name, err)
	}
	if err := e.store.deleteCluster(ctx, cid); err != nil {
		return fmt.Errorf("cluster %s: %w", g.Name, err)
	}
	e.removeCluster(cid)
	for _, r := range e.rulesBySource[g.Source.ID] {
		r.clearRenderError(cid)
		e.notify(r.key)
	}
	return nil
}

// targetOf is the install target of a known cluster, with the cluster's own source reference.
func targetOf(rec *clusterRecord) events.Target {
	c := &rec.Cluster
	return events.Target{Name: c.Name, Key: c.Key, URL: c.URL, Source: c.Source, Identity: c.Identity, Revision: rec.Revision}
}
