package main

// The engine is the rule engine's core: an in-memory view of the clusters every source lists,
// the compiled ClusterRules, and what each (rule, cluster) pair was last told to install. Its
// inputs are cluster events (from the stream) and rule changes (from the controller); its
// outputs are install and uninstall intents (to the stream) and dirty-rule notices (to the
// controller, which writes the status).
//
// This file holds the engine's state and the helpers that keep its indexes consistent. The
// entry points live with their story:
//
//	rules.go     applyRule, deleteRule: a ClusterRule compiled, applied or deleted
//	clusters.go  applyCluster, applyClusterGone: a cluster appeared, updated or gone
//	pairs.go     evalPair: what one (rule, cluster) pair needs, as install/uninstall intents
//	renders.go   evaluate: renders made outside the mutex, stopped renders remembered
//	commit.go    commit: publish the intents, then persist and apply the pairs
//	outcomes.go  applyOutcome: install, trigger and source outcomes folded back
//	reports.go   foldReport: outcomes and health reports folded together, a batch a round trip
//	handover.go  a rule's change of source: the old source's pairs wait, then move in place
//	status.go    status: a rule's status and Ready condition computed from the state
//
// Cost model: a cluster event evaluates only the rules of that cluster's source (rulesBySource)
// and the rules that hold a pair for it; a rule change evaluates only that rule, over the
// clusters of its source and the pairs it holds. A pair whose (generation, variables, URL) did
// not change since its last render is skipped without rendering.
//
// Concurrency: one mutex serialises every change, including the publish and the persist that
// follow a decision, so two inputs touching the same pair cannot interleave. Publishing waits
// for the stream's acknowledgement; throughput is bounded by that, not by matching. Every entry
// point takes the mutex; the helpers it calls expect it held. Outcomes and health reports, one
// an Application, are folded in batches under one hold of the mutex (reports.go). Rendering is
// the exception: it may take up to TEMPLATE_RENDER_TIMEOUT, so an entry point that needs renders
// makes them with the mutex released and then decides again (renders.go: engine.evaluate).

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// intentPublisher publishes intents; *events.Publisher is the real one.
type intentPublisher interface {
	PublishAll(ctx context.Context, evs []events.Event) error
}

// engine holds the state; see the file comment.
type engine struct {
	log         *slog.Logger
	store       store
	pub         intentPublisher
	renderer    *Renderer
	metrics     *metrics
	degradedTTL time.Duration
	// maxRemovalFraction sizes the rule edit breaker (MAX_REMOVAL_FRACTION).
	maxRemovalFraction float64
	now                func() time.Time
	// notify tells the controller that a rule's status may have changed.
	notify func(ruleKey string)
	// kubeEvents counts decisions and outcomes for the rules' Kubernetes Events (kubeevents.go);
	// nil records none.
	kubeEvents *ruleEvents
	// loaded is closed once the state is loaded; reconciles wait for it.
	loaded chan struct{}
	// reports are the outcomes and health reports waiting for the mutex (reports.go).
	reports reportQueue

	mu            sync.Mutex
	clusters      map[string]*clusterRecord        // by cluster id
	bySource      map[string]map[string]struct{}   // source id -> cluster ids
	rules         map[string]*ruleState            // by namespace/name
	rulesBySource map[string]map[string]*ruleState // source id -> rules
	pairs         map[string]map[string]*pairState // rule -> cluster id -> pair
	tallies       map[string]*ruleTally            // by rule: its pairs' enforcements counted (status.go)
	pairByName    map[string][]namedCluster        // cluster name -> the cluster ids pairs hold it for, sorted (pairsNamed)
	degraded      map[string]*degradation          // by source id
	held          map[string]*heldRemovals         // by rule: selection removals a rule edit held
	listed        map[string]*listing              // by source id: its last complete listing (handover.go)
	rollouts      map[string]*rolloutState         // by rule: its staged rollout (rollout.go)
}

func newEngine(log *slog.Logger, st store, pub intentPublisher, r *Renderer, m *metrics, degradedTTL time.Duration) *engine {
	return &engine{
		log: log, store: st, pub: pub, renderer: r, metrics: m, degradedTTL: degradedTTL, maxRemovalFraction: 0.1,
		now:           time.Now,
		notify:        func(string) {},
		loaded:        make(chan struct{}),
		clusters:      map[string]*clusterRecord{},
		bySource:      map[string]map[string]struct{}{},
		rules:         map[string]*ruleState{},
		rulesBySource: map[string]map[string]*ruleState{},
		pairs:         map[string]map[string]*pairState{},
		tallies:       map[string]*ruleTally{},
		pairByName:    map[string][]namedCluster{},
		degraded:      map[string]*degradation{},
		held:          map[string]*heldRemovals{},
		listed:        map[string]*listing{},
		rollouts:      map[string]*rolloutState{},
	}
}

// load restores the cluster view, the pairs, the degraded sources and the held rule edits from
// the store. Call it before consuming events or reconciling rules.
func (e *engine) load(ctx context.Context) error {
	clusters, pairs, err := e.store.load(ctx)
	if err != nil {
		return fmt.Errorf("load state: %w", err)
	}
	degraded, err := e.store.loadDegraded(ctx)
	if err != nil {
		return fmt.Errorf("load state: %w", err)
	}
	held, err := e.store.loadHeld(ctx)
	if err != nil {
		return fmt.Errorf("load state: %w", err)
	}
	listed, err := e.store.loadListed(ctx)
	if err != nil {
		return fmt.Errorf("load state: %w", err)
	}
	rollouts, err := e.store.loadRollouts(ctx)
	if err != nil {
		return fmt.Errorf("load state: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	maps.Copy(e.degraded, degraded)
	maps.Copy(e.held, held)
	e.countHeld()
	maps.Copy(e.listed, listed)
	for rule, rec := range rollouts {
		// Compiled again under the rule's grant when the rule is applied (beginRollout).
		e.rollouts[rule] = e.rolloutStateOf(rule, *rec, nil)
	}
	e.countRollouts()
	for cid, rec := range clusters {
		e.setCluster(cid, rec)
	}
	for rule, m := range pairs {
		for cid, p := range m {
			e.setPair(rule, cid, p)
		}
	}
	e.log.Info("Loaded state", "clusters", len(clusters), "rules", len(pairs))
	return nil
}

// setCluster records a cluster in the view, in its source's index and in the matched views of
// its source's rules.
func (e *engine) setCluster(cid string, rec *clusterRecord) {
	rec.compact()
	src := rec.Cluster.Source.ID
	var old *events.Cluster
	if prev := e.clusters[cid]; prev != nil {
		old = &prev.Cluster
	}
	e.noteMatched(src, old, &rec.Cluster)
	e.clusters[cid] = rec
	if e.bySource[src] == nil {
		e.bySource[src] = map[string]struct{}{}
	}
	e.bySource[src][cid] = struct{}{}
	e.metrics.clusters.Set(float64(len(e.clusters)))
}

// removeCluster forgets a cluster, in the view, in its source's index and in the matched views
// of its source's rules.
func (e *engine) removeCluster(cid string) {
	if rec, ok := e.clusters[cid]; ok {
		e.noteMatched(rec.Cluster.Source.ID, &rec.Cluster, nil)
		delete(e.bySource[rec.Cluster.Source.ID], cid)
		delete(e.clusters, cid)
	}
	e.metrics.clusters.Set(float64(len(e.clusters)))
}

// setPair records (nil: forgets) a pair, in pairs and in the by-name index outcomes and
// handovers find pairs by. A rule may hold several pairs of one name: clusters of its old
// sources (a handover waiting for argo-syncer's confirmation, or two old sources listing the
// name) next to its current source's, or two clusters of one name (another identity each).
func (e *engine) setPair(rule, cid string, p *pairState) {
	old := e.pairs[rule][cid]
	var name, oldName string
	if p != nil {
		name = p.Cluster.Value().Name
	}
	if old != nil {
		oldName = old.Cluster.Value().Name
		if p == nil || oldName != name {
			e.unindexName(oldName, cid)
		}
		e.tallies[rule].count(cid, old, -1)
	}
	if p == nil {
		if old != nil {
			delete(e.pairs[rule], cid)
			if len(e.pairs[rule]) == 0 {
				delete(e.pairs, rule)
				delete(e.tallies, rule)
			}
		}
		return
	}
	if e.pairs[rule] == nil {
		e.pairs[rule] = map[string]*pairState{}
		e.tallies[rule] = &ruleTally{}
	}
	e.tallies[rule].count(cid, p, 1)
	e.pairs[rule][cid] = p
	if old == nil || oldName != name {
		e.indexName(name, cid)
	}
}

// namedCluster is an entry of the by-name index: a cluster id that pairs hold under the name,
// and how many rules' pairs do. The index is by name alone, not by rule and name: a fleet keeps
// one entry a cluster, where an entry a pair cost each cluster ten at ten rules (about 80 bytes
// each). A name nearly always has one cluster id (two are the rare clash, or a handover), so
// the ids are a sorted slice, not a set.
type namedCluster struct {
	cid   string
	pairs int
}

// indexName counts one more pair that holds cluster id cid under the name.
func (e *engine) indexName(name, cid string) {
	ids := e.pairByName[name]
	i, found := slices.BinarySearchFunc(ids, cid, compareNamedCluster)
	if found {
		ids[i].pairs++
		return
	}
	e.pairByName[name] = slices.Insert(ids, i, namedCluster{cid: cid, pairs: 1})
}

// unindexName counts one pair fewer that holds cluster id cid under the name, and forgets the
// id when none is left.
func (e *engine) unindexName(name, cid string) {
	ids := e.pairByName[name]
	i, found := slices.BinarySearchFunc(ids, cid, compareNamedCluster)
	if !found {
		return
	}
	if ids[i].pairs--; ids[i].pairs > 0 {
		return
	}
	if ids = slices.Delete(ids, i, i+1); len(ids) == 0 {
		delete(e.pairByName, name)
	} else {
		e.pairByName[name] = ids
	}
}

func compareNamedCluster(n namedCluster, cid string) int { return strings.Compare(n.cid, cid) }

// pairsNamed returns, sorted, the cluster ids of the rule's pairs whose cluster has the name:
// those of the name's index entry for which the rule holds a pair under that name (another
// rule's pair may hold the cluster id under the name while this rule's holds it under another,
// or holds none).
func (e *engine) pairsNamed(rule, name string) []string {
	var cids []string
	for _, n := range e.pairByName[name] {
		if p := e.pairs[rule][n.cid]; p != nil && p.Cluster.Value().Name == name {
			cids = append(cids, n.cid)
		}
	}
	return cids
}

// indexRule records a rule, replacing the one of the same key, in rules and in its source's index.
func (e *engine) indexRule(r *ruleState) {
	if old := e.rules[r.key]; old != nil && old.sel != nil {
		delete(e.rulesBySource[old.sel.source.ID], r.key)
	}
	e.rules[r.key] = r
	if r.sel != nil {
		if e.rulesBySource[r.sel.source.ID] == nil {
			e.rulesBySource[r.sel.source.ID] = map[string]*ruleState{}
		}
		e.rulesBySource[r.sel.source.ID][r.key] = r
	}
	e.metrics.rules.Set(float64(len(e.rules)))
}
