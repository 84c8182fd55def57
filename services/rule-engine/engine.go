package main

// The engine is the rule engine's core: an in-memory view of the clusters every source lists,
// the compiled ClusterRules, and what each (rule, cluster) pair was last told to install. Its
// inputs are cluster events (from the stream) and rule changes (from the controller); its
// outputs are install and uninstall intents (to the stream) and dirty-rule notices (to the
// controller, which writes the status).
//
// Cost model: a cluster event evaluates only the rules of that cluster's source (rulesBySource)
// and the rules that hold a pair for it; a rule change evaluates only that rule, over the
// clusters of its source and the pairs it holds. A pair whose (generation, variables, URL) did
// not change since its last render is skipped without rendering.
//
// Concurrency: one mutex serialises every change, including the publish and the persist that
// follow a decision, so two inputs touching the same pair cannot interleave. Publishing waits
// for the stream's acknowledgement; throughput is bounded by that, not by matching.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
)

// intentPublisher publishes intents; *events.Publisher is the real one.
type intentPublisher interface {
	PublishAll(ctx context.Context, evs []events.Event) error
}

// ruleState is one compiled ClusterRule.
type ruleState struct {
	key            string // namespace/name
	ref            events.RuleRef
	sel            *selection
	invalid        error // the spec cannot be used; existing pairs are kept as they are
	compiled       *compiledRule
	triggers       *events.Triggers
	deletionPolicy string
	// renderPrefix is "<uid>.<generation>.", the rule part of render cache keys.
	renderPrefix string
	// static is the render of a rule without templates (the same for every cluster).
	static    []events.Enforcement
	staticErr error
	// templateErrors are the pairs whose render failed, by cluster id: cluster name and message.
	templateErrors map[string][2]string
	// runaway are the render keys whose render timed out: not tried again in this generation.
	runaway map[string]bool
}

// degradation is the last "source degraded" event of a source.
type degradation struct {
	reason, message string
	held            []string
	at              time.Time
}

// engine holds the state; see the file comment.
type engine struct {
	log         *slog.Logger
	store       store
	pub         intentPublisher
	renderer    *Renderer
	metrics     *metrics
	degradedTTL time.Duration
	now         func() time.Time
	// notify tells the controller that a rule's status may have changed.
	notify func(ruleKey string)
	// loaded is closed once the state is loaded; reconciles wait for it.
	loaded chan struct{}

	mu            sync.Mutex
	clusters      map[string]*clusterRecord        // by cluster id
	bySource      map[string]map[string]struct{}   // source id -> cluster ids
	rules         map[string]*ruleState            // by namespace/name
	rulesBySource map[string]map[string]*ruleState // source id -> rules
	pairs         map[string]map[string]*pairState // rule -> cluster id -> pair
	pairByName    map[string]string                // rule + "\x00" + cluster name -> cluster id
	degraded      map[string]*degradation          // by source id
}

func newEngine(log *slog.Logger, st store, pub intentPublisher, r *Renderer, m *metrics, degradedTTL time.Duration) *engine {
	return &engine{
		log: log, store: st, pub: pub, renderer: r, metrics: m, degradedTTL: degradedTTL,
		now:           time.Now,
		notify:        func(string) {},
		loaded:        make(chan struct{}),
		clusters:      map[string]*clusterRecord{},
		bySource:      map[string]map[string]struct{}{},
		rules:         map[string]*ruleState{},
		rulesBySource: map[string]map[string]*ruleState{},
		pairs:         map[string]map[string]*pairState{},
		pairByName:    map[string]string{},
		degraded:      map[string]*degradation{},
	}
}

// load restores the cluster view and the pairs from the store. Call it before consuming events
// or reconciling rules.
func (e *engine) load(ctx context.Context) error {
	clusters, pairs, err := e.store.load(ctx)
	if err != nil {
		return fmt.Errorf("load state: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
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

func (e *engine) setCluster(cid string, rec *clusterRecord) {
	e.clusters[cid] = rec
	src := rec.Cluster.Source.ID
	if e.bySource[src] == nil {
		e.bySource[src] = map[string]struct{}{}
	}
	e.bySource[src][cid] = struct{}{}
	e.metrics.clusters.Set(float64(len(e.clusters)))
}

func (e *engine) removeCluster(cid string) {
	if rec, ok := e.clusters[cid]; ok {
		delete(e.bySource[rec.Cluster.Source.ID], cid)
		delete(e.clusters, cid)
	}
	e.metrics.clusters.Set(float64(len(e.clusters)))
}

func (e *engine) setPair(rule, cid string, p *pairState) {
	old := e.pairs[rule][cid]
	if p == nil {
		if old != nil {
			delete(e.pairs[rule], cid)
			delete(e.pairByName, rule+"\x00"+old.Cluster.Name)
			if len(e.pairs[rule]) == 0 {
				delete(e.pairs, rule)
			}
		}
		return
	}
	if e.pairs[rule] == nil {
		e.pairs[rule] = map[string]*pairState{}
	}
	if old != nil && old.Cluster.Name != p.Cluster.Name {
		delete(e.pairByName, rule+"\x00"+old.Cluster.Name)
	}
	e.pairs[rule][cid] = p
	e.pairByName[rule+"\x00"+p.Cluster.Name] = cid
}

// change is the outcome of evaluating inputs: intents to publish, then pair states to persist
// (nil: delete) and apply. Nothing is applied in memory until both publish and persist worked,
// so a failed step is retried from the same starting point.
type change struct {
	intents []events.Event
	pairs   []pairUpdate
}

type pairUpdate struct {
	rule, cid string
	next      *pairState
}

// commit publishes the intents, persists the pairs and applies them in memory. It runs to the
// end even when ctx is cancelled (shutdown), within commitTimeout: stopping between the publish
// and the persist would leave intents the state does not know about.
func (e *engine) commit(ctx context.Context, ch *change) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	for start := 0; start < len(ch.intents); start += publishBatch {
		batch := ch.intents[start:min(start+publishBatch, len(ch.intents))]
		if err := e.pub.PublishAll(ctx, batch); err != nil {
			return err
		}
	}
	if err := e.persist(ctx, ch.pairs); err != nil {
		return err
	}
	for _, ev := range ch.intents {
		switch i := ev.(type) {
		case *events.InstallIntent:
			e.metrics.intents.WithLabelValues("install", "").Inc()
		case *events.UninstallIntent:
			e.metrics.intents.WithLabelValues("uninstall", i.Reason).Inc()
		}
	}
	for _, u := range ch.pairs {
		e.setPair(u.rule, u.cid, u.next)
	}
	return nil
}

// persist stores the pair records, up to persistParallel at a time: a rule over thousands of
// clusters would otherwise wait for thousands of sequential KV round trips. Records of different
// pairs are independent, so their order does not matter.
func (e *engine) persist(ctx context.Context, updates []pairUpdate) error {
	sem := make(chan struct{}, persistParallel)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, u := range updates {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			var err error
			if u.next == nil {
				err = e.store.deletePair(ctx, u.rule, u.cid)
			} else {
				err = e.store.putPair(ctx, u.rule, u.cid, u.next)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// persistParallel bounds concurrent KV writes of one commit.
const persistParallel = 32

// commitTimeout bounds one commit.
const commitTimeout = 2 * time.Minute

// publishBatch bounds how many intents are in flight at once.
const publishBatch = 512

// ---- rules ----

// ruleFromSpec compiles a ClusterRule. secretNamespace is OPERATOR_NAMESPACE.
func ruleFromSpec(cr *v1beta1.ClusterRule, secretNamespace string) *ruleState {
	r := &ruleState{
		key:            cr.Namespace + "/" + cr.Name,
		ref:            events.RuleRef{Namespace: cr.Namespace, Name: cr.Name, UID: string(cr.UID), Generation: cr.Generation},
		deletionPolicy: cr.Spec.DeletionPolicy,
		templateErrors: map[string][2]string{},
		runaway:        map[string]bool{},
	}
	if r.deletionPolicy == "" {
		r.deletionPolicy = events.DeletionOrphan
	}
	r.renderPrefix = string(cr.UID) + "." + strconv.FormatInt(cr.Generation, 10) + "."
	r.sel, r.invalid = compileSelection(cr.Spec.Source, secretNamespace)
	if r.invalid == nil && len(cr.Spec.Enforcements) == 0 {
		r.invalid = errors.New("spec.enforcements: at least one enforcement is required")
	}
	r.compiled = compile(cr.Spec.Enforcements)
	if !r.compiled.templated {
		r.static, r.staticErr = (&Renderer{}).render(r.compiled, nil)
		if r.staticErr != nil && r.invalid == nil {
			r.invalid = r.staticErr
		}
	}
	if t := cr.Spec.Triggers; t != nil && (t.BeforeInstall != nil || t.AfterInstall != nil) {
		r.triggers = &events.Triggers{BeforeInstall: trigger(t.BeforeInstall), AfterInstall: trigger(t.AfterInstall)}
	}
	return r
}

func trigger(t *v1beta1.Trigger) *events.Trigger {
	if t == nil {
		return nil
	}
	out := &events.Trigger{Endpoint: t.Endpoint, TimeoutSeconds: int(t.Timeout), FailurePolicy: t.FailurePolicy, SigningSecret: t.SigningSecret}
	if out.TimeoutSeconds == 0 {
		out.TimeoutSeconds = 5 // the original's default
	}
	if out.FailurePolicy == "" {
		out.FailurePolicy = "Ignore"
	}
	return out
}

// applyRule evaluates a new or changed rule against its clusters. The same uid and generation
// as the rule already known is a no-op, so status-only reconciles cost nothing.
func (e *engine) applyRule(ctx context.Context, r *ruleState) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if old := e.rules[r.key]; old != nil && old.ref.UID == r.ref.UID && old.ref.Generation == r.ref.Generation {
		return nil
	}
	// The rule's clusters are those of its source, plus those it holds pairs for (which may be
	// of the source it had before this change).
	if r.invalid != nil {
		e.log.Warn("Rule spec is invalid; its clusters keep what they have", "rule", r.key, "error", r.invalid)
		e.indexRule(r)
		e.notify(r.key)
		return nil
	}
	ch := &change{}
	seen := map[string]bool{}
	for cid := range e.bySource[r.sel.source.ID] {
		seen[cid] = true
		e.evalPair(ctx, r, r.key, cid, e.clusters[cid], 0, ch)
	}
	for cid := range e.pairs[r.key] {
		if !seen[cid] {
			// A cluster of another source (the rule's source changed) or one no longer known.
			e.evalPair(ctx, r, r.key, cid, e.clusters[cid], 0, ch)
		}
	}
	if err := e.commit(ctx, ch); err != nil {
		return fmt.Errorf("rule %s: %w", r.key, err)
	}
	e.indexRule(r)
	e.notify(r.key)
	if r.compiled.templated {
		e.purgeRendersLater(r.ref.UID, r.ref.Generation)
	}
	return nil
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

// deleteRule uninstalls every pair of the rule (reason RuleDeleted) and forgets it. ref is the
// rule as last seen; with a zero ref the stored pairs' own rule reference is used.
func (e *engine) deleteRule(ctx context.Context, key string, ref events.RuleRef, deletionPolicy string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch := &change{}
	uids := map[string]bool{}
	for cid, p := range e.pairs[key] {
		uids[p.Rule.UID] = true
		rr, policy := ref, deletionPolicy
		if rr.Name == "" {
			rr, policy = p.Rule, p.DeletionPolicy
		}
		target := p.Cluster
		if rec := e.clusters[cid]; rec != nil {
			target = targetOf(rec)
			target.Source = p.Cluster.Source // the rule's Secret reference, as installed
		}
		ch.intents = append(ch.intents, uninstalls(rr, target, p, events.UninstallRuleDeleted, policy)...)
		ch.pairs = append(ch.pairs, pairUpdate{rule: key, cid: cid})
	}
	if err := e.commit(ctx, ch); err != nil {
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

// ruleKeysWithPairs lists the rules the engine holds install records for.
func (e *engine) ruleKeysWithPairs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return sortedKeys(e.pairs)
}

// ---- clusters ----

// applyCluster records an appeared or updated cluster and re-evaluates the rules that can match
// it. A record older than the one known (a stale redelivery) is ignored.
func (e *engine) applyCluster(ctx context.Context, c events.Cluster, revision uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	cid := clusterID(c.Source.ID, c.Key)
	if old := e.clusters[cid]; old != nil && old.Revision > revision {
		return nil
	}
	// Rules of the cluster's source decide whether it matches; rules of another source that
	// still hold a pair for it (their source changed) let it go.
	rec := &clusterRecord{Cluster: c, Revision: revision}
	ch := &change{}
	cv := &clusterVars{}
	for _, r := range e.rulesBySource[c.Source.ID] {
		e.evalPairVars(ctx, r, r.key, cid, rec, 0, ch, cv)
	}
	for rule, m := range e.pairs {
		if _, ok := m[cid]; ok && e.rulesBySource[c.Source.ID][rule] == nil {
			e.evalPairVars(ctx, e.rules[rule], rule, cid, rec, 0, ch, cv)
		}
	}
	if err := e.commit(ctx, ch); err != nil {
		return fmt.Errorf("cluster %s: %w", c.Name, err)
	}
	if err := e.store.putCluster(ctx, cid, rec); err != nil {
		return fmt.Errorf("cluster %s: %w", c.Name, err)
	}
	e.setCluster(cid, rec)
	for _, r := range e.rulesBySource[c.Source.ID] {
		e.notify(r.key)
	}
	return nil
}

// removeClusterGone uninstalls every pair of a cluster its source no longer lists (reason
// ClusterGone, always orphaning: there is no cluster to delete resources from) and forgets it.
func (e *engine) applyClusterGone(ctx context.Context, g *events.ClusterGone) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	cid := clusterID(g.Source.ID, g.Key)
	if old := e.clusters[cid]; old != nil && old.Revision > g.Revision {
		return nil // it came back after this event was written
	}
	ch := &change{}
	for rule, m := range e.pairs {
		if _, ok := m[cid]; ok {
			e.evalPair(ctx, e.rules[rule], rule, cid, nil, g.Revision, ch)
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
		delete(r.templateErrors, cid)
		e.notify(r.key)
	}
	return nil
}

func targetOf(rec *clusterRecord) events.Target {
	c := &rec.Cluster
	return events.Target{Name: c.Name, Key: c.Key, URL: c.URL, Source: c.Source, Revision: rec.Revision}
}

// evalPair decides what one (rule, cluster) pair needs and appends it to ch. r may be nil (a
// rule not loaded yet: its pairs are only touched when their cluster is gone); rec is nil when
// the cluster is gone (goneRevision) or unknown.
func (e *engine) evalPair(ctx context.Context, r *ruleState, rule, cid string, rec *clusterRecord, goneRevision uint64, ch *change) {
	e.evalPairVars(ctx, r, rule, cid, rec, goneRevision, ch, &clusterVars{})
}

// clusterVars computes a cluster's template variables and their hash at most once, however many
// rules evaluate the cluster.
type clusterVars struct {
	vars map[string]any
	hash string
}

func (cv *clusterVars) get(c *events.Cluster) (map[string]any, string) {
	if cv.vars == nil {
		cv.vars = templateVars(c)
		cv.hash = varsHash(cv.vars)
	}
	return cv.vars, cv.hash
}

// evalPairVars is evalPair with the cluster's variables shared across rules. The decision table,
// in order:
//
//	cluster gone (or unknown)          -> uninstall all (ClusterGone, orphan) and drop the pair
//	rule unknown or invalid            -> keep the pair as it is
//	rule no longer selects the cluster -> uninstall all (NoLongerMatches, rule's policy), drop
//	cluster present but not eligible   -> keep the pair as it is (eligibility never removes)
//	same render key and URL as before  -> nothing to do
//	template error                     -> keep the pair, record the error for the status
//	otherwise                          -> install what is new or changed, uninstall what the
//	                                      render no longer has (EnforcementRemoved)
func (e *engine) evalPairVars(ctx context.Context, r *ruleState, rule, cid string, rec *clusterRecord, goneRevision uint64, ch *change, cv *clusterVars) {
	old := e.pairs[rule][cid]
	switch {
	case rec == nil:
		if old == nil {
			return // nothing was installed here
		}
		target := old.Cluster
		target.Gone, target.Revision = true, max(goneRevision, target.Revision)
		reason := events.UninstallClusterGone
		if goneRevision == 0 { // not gone, just not in the view: treat as no longer selected
			target.Gone, reason = false, events.UninstallNoLongerMatches
		}
		ref := old.Rule
		if r != nil {
			ref = r.ref
		}
		ch.intents = append(ch.intents, uninstalls(ref, target, old, reason, events.DeletionOrphan)...)
		ch.pairs = append(ch.pairs, pairUpdate{rule: rule, cid: cid})
		return
	case r == nil || r.invalid != nil:
		return // unknown or unusable rule: keep what the pair has
	case !r.sel.selects(&rec.Cluster):
		delete(r.templateErrors, cid)
		if old != nil {
			ch.intents = append(ch.intents, uninstalls(r.ref, targetOf(rec), old, events.UninstallNoLongerMatches, r.deletionPolicy)...)
			ch.pairs = append(ch.pairs, pairUpdate{rule: rule, cid: cid})
		}
		return
	case !rec.Cluster.Eligible:
		return // present but not eligible: keeps what it has, gets nothing new
	}

	// Selected and eligible: render, then diff against what the pair has.
	var (
		vars      map[string]any
		renderKey string
	)
	if r.compiled.templated {
		var hash string
		vars, hash = cv.get(&rec.Cluster)
		renderKey = r.renderPrefix + hash
	} else {
		renderKey = r.renderPrefix + "static"
	}
	if old != nil && old.RenderKey == renderKey && old.Cluster.URL == rec.Cluster.URL {
		return // nothing changed since the last render
	}
	enfs, err := e.renderPair(ctx, r, renderKey, vars)
	if err != nil {
		e.metrics.renderErrors.Inc()
		r.templateErrors[cid] = [2]string{rec.Cluster.Name, err.Error()}
		return // a template error touches only this pair: it keeps what it has
	}
	delete(r.templateErrors, cid)

	target := targetOf(rec)
	// The rule's own reference to its source Secret: the ids are equal, and the rule is where
	// the Secret name and namespace are defined.
	target.Source = r.sel.source
	next := &pairState{Rule: r.ref, Cluster: target, RenderKey: renderKey, DeletionPolicy: r.deletionPolicy,
		Enforcements: make(map[string]*enfState, len(enfs))}
	// Enforcements are identified by their rendered name (the Application is named after it), so
	// a template that renames an enforcement is an install of the new name and an uninstall of
	// the old one.
	for i := range enfs {
		en := &enfs[i]
		hash := specHash(en, rec.Cluster.URL)
		if prev := oldEnf(old, en.Name); prev != nil && prev.SpecHash == hash {
			// Unchanged: keep its intent id and outcomes; the new generation needs no intent.
			cp := *prev
			next.Enforcements[en.Name] = &cp
			continue
		}
		intent := &events.InstallIntent{Rule: r.ref, Cluster: withRegistration(target, &rec.Cluster), Enforcement: *en, SpecHash: hash,
			Triggers: r.triggers, DeletionPolicy: r.deletionPolicy}
		ch.intents = append(ch.intents, intent)
		next.Enforcements[en.Name] = &enfState{SpecHash: hash, IntentID: intent.ID()}
	}
	if old != nil {
		removed := &pairState{Enforcements: map[string]*enfState{}}
		for name, st := range old.Enforcements {
			if next.Enforcements[name] == nil {
				removed.Enforcements[name] = st
			}
		}
		ch.intents = append(ch.intents, uninstalls(r.ref, target, removed, events.UninstallEnforcementRemoved, r.deletionPolicy)...)
	}
	ch.pairs = append(ch.pairs, pairUpdate{rule: rule, cid: cid, next: next})
}

func oldEnf(p *pairState, name string) *enfState {
	if p == nil {
		return nil
	}
	return p.Enforcements[name]
}

// renderPair renders a rule for one cluster, through the render cache for templated rules: a
// template whose output changes on every call (uuid) is rendered once per (generation, vars).
func (e *engine) renderPair(ctx context.Context, r *ruleState, key string, vars map[string]any) ([]events.Enforcement, error) {
	if !r.compiled.templated {
		return r.static, r.staticErr
	}
	// A cache read error is not fatal: rendering again is correct, only maybe not identical for
	// a non-deterministic template.
	if enfs, ok, err := e.store.getRender(ctx, key); err == nil && ok {
		e.metrics.renders.WithLabelValues("hit").Inc()
		return enfs, nil
	}
	if r.runaway[key] {
		return nil, errRenderTimeout
	}
	e.metrics.renders.WithLabelValues("miss").Inc()
	enfs, err := e.renderer.renderSafely(r.compiled, vars)
	if errors.Is(err, errRenderTimeout) {
		r.runaway[key] = true
	}
	if err != nil {
		return nil, err
	}
	if err := e.store.putRender(ctx, key, enfs); err != nil {
		e.log.Warn("Render not cached", "rule", r.key, "error", err)
	}
	return enfs, nil
}

// uninstalls returns one uninstall intent per enforcement of the pair, in name order.
func uninstalls(ref events.RuleRef, target events.Target, p *pairState, reason, policy string) []events.Event {
	if policy == "" || target.Gone {
		policy = events.DeletionOrphan
	}
	var out []events.Event
	for _, name := range sortedKeys(p.Enforcements) {
		out = append(out, &events.UninstallIntent{Rule: ref, Cluster: target, Enforcement: name, Reason: reason, DeletionPolicy: policy})
	}
	return out
}

// ---- outcomes ----

// applyOutcome folds an install, trigger or source outcome into the state behind the status.
func (e *engine) applyOutcome(ctx context.Context, ev events.Event, meta events.Meta) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if d, ok := ev.(*events.SourceDegraded); ok {
		at := meta.Time
		if at.IsZero() {
			at = e.now()
		}
		if prev := e.degraded[d.Source.ID]; prev != nil && prev.at.After(at) {
			return nil // an older scan's report
		}
		// Kept in memory only: after a restart the condition clears, as it would after the TTL.
		e.degraded[d.Source.ID] = &degradation{reason: d.Reason, message: d.Message, held: d.HeldRemovals, at: at}
		for _, r := range e.rulesBySource[d.Source.ID] {
			e.notify(r.key)
		}
		return nil
	}
	var (
		rule          events.RuleRef
		cluster, name string
		id            = ev.ID()
		apply         func(st *enfState) bool
	)
	switch o := ev.(type) {
	case *events.InstallSucceeded:
		rule, cluster, name = o.Rule, o.Cluster, o.Enforcement
		apply = func(st *enfState) bool {
			if st.SpecHash != o.SpecHash && st.IntentID != o.IntentID {
				return false
			}
			st.Installed, st.Failure, st.TriggerBlocked = true, nil, ""
			return true
		}
	case *events.InstallFailed:
		rule, cluster, name = o.Rule, o.Cluster, o.Enforcement
		apply = func(st *enfState) bool {
			if st.IntentID != o.IntentID {
				return false
			}
			count := int32(1)
			if st.Failure != nil {
				count = st.Failure.Count + 1
			}
			st.Installed = false
			st.Failure = &failure{Reason: o.Reason, Message: truncate(o.Message, 512), Count: count}
			return true
		}
	case *events.TriggerFailed:
		// Only a beforeInstall failure holds the install (argo-syncer does not create the
		// Application). An afterInstall one comes after the Application was created: it is
		// reported, but the install is not blocked.
		rule, cluster, name = o.Rule, o.Cluster, o.Enforcement
		apply = func(st *enfState) bool {
			if st.IntentID != o.IntentID || o.FailurePolicy != "Fail" {
				return false
			}
			msg := fmt.Sprintf("%s trigger: %s", o.Phase, truncate(o.Message, 256))
			if o.Phase == events.PhaseAfterInstall {
				st.AfterInstallFailed = msg
			} else {
				st.TriggerBlocked = msg
			}
			return true
		}
	case *events.TriggerDelivered:
		rule, cluster, name = o.Rule, o.Cluster, o.Enforcement
		apply = func(st *enfState) bool {
			if st.IntentID != o.IntentID {
				return false
			}
			if o.Phase == events.PhaseAfterInstall {
				if st.AfterInstallFailed == "" {
					return false
				}
				st.AfterInstallFailed = ""
				return true
			}
			if st.TriggerBlocked == "" {
				return false
			}
			st.TriggerBlocked = ""
			return true
		}
	default:
		return nil // uninstall done and anything else: nothing to keep
	}
	key := rule.Namespace + "/" + rule.Name
	cid, ok := e.pairByName[key+"\x00"+cluster]
	if !ok {
		return nil
	}
	p := e.pairs[key][cid]
	st := p.Enforcements[name]
	if st == nil || st.LastOutcome == id {
		return nil // not ours any more, or a redelivery already counted
	}
	// Copy on write: memory changes only after the record is stored.
	next := p.clone()
	nst := next.Enforcements[name]
	if !apply(nst) {
		return nil
	}
	nst.LastOutcome = id
	if err := e.store.putPair(ctx, key, cid, next); err != nil {
		return err
	}
	e.setPair(key, cid, next)
	e.notify(key)
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// ---- status ----

// status computes a rule's status from the state. It returns how long until a time-bound
// condition (source degraded) expires, or 0.
func (e *engine) status(key string, generation int64) (v1beta1.ClusterRuleStatus, time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := v1beta1.ClusterRuleStatus{ObservedGeneration: generation}
	r := e.rules[key]
	cond := metav1Condition(generation)
	if r == nil {
		return st, 0
	}
	if r.invalid != nil {
		cond.Status, cond.Reason, cond.Message = "False", v1beta1.ReasonInvalidSpec, r.invalid.Error()
		st.Conditions = append(st.Conditions, cond)
		return st, 0
	}
	// Matched clusters are counted from the view (present and selected, eligible or not); the
	// listed ones are the first MaxStatusEntries by name, so the list is stable between writes.
	var names []v1beta1.ClusterStatus
	for cid := range e.bySource[r.sel.source.ID] {
		if c := &e.clusters[cid].Cluster; r.sel.selects(c) {
			names = append(names, v1beta1.ClusterStatus{Name: c.Name, URL: c.URL})
		}
	}
	slices.SortFunc(names, func(a, b v1beta1.ClusterStatus) int { return compareStrings(a.Name, b.Name) })
	st.MatchedClusters = int32(len(names))
	st.Clusters = names[:min(len(names), v1beta1.MaxStatusEntries)]

	// Per enforcement: installed (confirmed by argo-syncer), failed (last outcome), or pending.
	var pending, blocked, afterFailed int
	var blockedMsg string
	var installErrors []v1beta1.InstallError
	for _, p := range e.pairs[key] {
		for name, es := range p.Enforcements {
			switch {
			case es.Installed:
				st.InstalledApplications++
			case es.Failure != nil:
				st.InstallErrorCount++
				installErrors = append(installErrors, v1beta1.InstallError{Cluster: p.Cluster.Name, Enforcement: name,
					Reason: es.Failure.Reason, Message: es.Failure.Message, Count: es.Failure.Count})
			default:
				pending++
			}
			if es.TriggerBlocked != "" {
				blocked++
				blockedMsg = fmt.Sprintf("%s on %s: %s", name, p.Cluster.Name, es.TriggerBlocked)
			}
			// An afterInstall trigger that failed under Fail: the Application is installed (and
			// counted so), the failure is listed with the install errors under its own reason.
			if es.AfterInstallFailed != "" && es.Failure == nil {
				afterFailed++
				installErrors = append(installErrors, v1beta1.InstallError{Cluster: p.Cluster.Name, Enforcement: name,
					Reason: v1beta1.ReasonAfterInstallFailed, Message: es.AfterInstallFailed, Count: 1})
			}
		}
	}
	installFailed := st.InstallErrorCount
	st.InstallErrorCount += int32(afterFailed)
	slices.SortFunc(installErrors, func(a, b v1beta1.InstallError) int {
		return compareStrings(a.Cluster+"/"+a.Enforcement, b.Cluster+"/"+b.Enforcement)
	})
	st.InstallErrors = installErrors[:min(len(installErrors), v1beta1.MaxStatusEntries)]

	var requeue time.Duration
	deg := e.degraded[r.sel.source.ID]
	if deg != nil {
		if left := deg.at.Add(e.degradedTTL).Sub(e.now()); left > 0 {
			requeue = left
		} else {
			deg = nil
		}
	}
	// The most important reason wins, in the order of conditions.go.
	cond.Status = "False"
	switch {
	case len(r.templateErrors) > 0:
		cid := sortedKeys(r.templateErrors)[0]
		te := r.templateErrors[cid]
		cond.Reason = v1beta1.ReasonTemplateError
		cond.Message = fmt.Sprintf("templates failed on %d cluster(s); %s: %s", len(r.templateErrors), te[0], te[1])
	case deg != nil && deg.reason == events.DegradedRemovalsHeld:
		cond.Reason = v1beta1.ReasonRemovalsHeld
		cond.Message = fmt.Sprintf("source %s holds %d removal(s) until an operator releases them: %s", r.sel.source.Kind, len(deg.held), deg.message)
	case deg != nil:
		cond.Reason = v1beta1.ReasonSourceDegraded
		cond.Message = fmt.Sprintf("source %s: %s: %s", r.sel.source.Kind, deg.reason, deg.message)
	case blocked > 0:
		cond.Reason = v1beta1.ReasonTriggerBlocked
		cond.Message = fmt.Sprintf("%d install(s) held by a failing trigger; %s", blocked, blockedMsg)
	case installFailed > 0:
		cond.Reason = v1beta1.ReasonInstallFailed
		cond.Message = fmt.Sprintf("%d install(s) failed; see status.installErrors", installFailed)
	case afterFailed > 0:
		cond.Reason = v1beta1.ReasonAfterInstallFailed
		cond.Message = fmt.Sprintf("%d afterInstall trigger(s) with failurePolicy Fail failed after the Application was created; see status.installErrors", afterFailed)
	case pending > 0:
		cond.Reason = v1beta1.ReasonProgressing
		cond.Message = fmt.Sprintf("%d install(s) issued, %d confirmed", pending+int(st.InstalledApplications), st.InstalledApplications)
	case st.MatchedClusters == 0:
		cond.Status, cond.Reason, cond.Message = "True", v1beta1.ReasonNoClusters, "no cluster matches the rule yet"
	default:
		cond.Status, cond.Reason = "True", v1beta1.ReasonInstalled
		cond.Message = fmt.Sprintf("%d application(s) installed on %d cluster(s)", st.InstalledApplications, st.MatchedClusters)
	}
	st.Conditions = append(st.Conditions, cond)
	return st, requeue
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
