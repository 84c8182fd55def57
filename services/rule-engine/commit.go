package main

// Committing a decision. Evaluating inputs only describes a change (intents to publish, pair
// records to write); commit carries it out in the one order that survives a crash: publish the
// intents, persist the pair records, and only then apply them in memory and count them.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// persistParallel bounds concurrent KV writes of one commit.
const persistParallel = 32

// commitTimeout bounds one commit.
const commitTimeout = 2 * time.Minute

// publishBatch bounds how many intents are in flight at once.
const publishBatch = 512

// change is the outcome of evaluating inputs: intents to publish, then pair states to persist
// (nil: delete) and apply. Nothing is applied in memory until both publish and persist worked,
// so a failed step is retried from the same starting point.
type change struct {
	intents []events.Event
	pairs   []pairUpdate
	// unselected are the pairs the change uninstalls because the rule no longer selects their
	// cluster (NoLongerMatches), as spans of intents and pairs: what the rule edit breaker holds.
	unselected []unselectedSpan
	// successors caches, per rule, the names of the clusters of its current source it selects
	// (see hasSuccessor).
	successors map[string]map[string]bool
	// renders are the renders the evaluation may use, and collects those it lacks (see
	// engine.evaluate); nil for a change that renders nothing (cluster gone, rule deleted).
	renders *renders
	// plans caches, per rule being rolled out, where its rollout stands (rollout.go).
	plans map[string]*rolloutPlan
}

// unselectedSpan is one selection removal in a change: the pair update at pairs[pair] and its
// uninstall intents at intents[from:to].
type unselectedSpan struct {
	cid            string
	pair, from, to int
}

// dropUnselected takes the selection removals out of the change.
func (ch *change) dropUnselected() {
	dropPair, dropIntent := map[int]bool{}, map[int]bool{}
	for _, u := range ch.unselected {
		dropPair[u.pair] = true
		for i := u.from; i < u.to; i++ {
			dropIntent[i] = true
		}
	}
	var intents []events.Event
	for i, ev := range ch.intents {
		if !dropIntent[i] {
			intents = append(intents, ev)
		}
	}
	var pairs []pairUpdate
	for i, u := range ch.pairs {
		if !dropPair[i] {
			pairs = append(pairs, u)
		}
	}
	ch.intents, ch.pairs, ch.unselected = intents, pairs, nil
}

// pairUpdate is the next record of one pair; a nil next deletes it.
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
	shareProjectRepos(ch.intents)
	if err := e.publish(ctx, ch.intents); err != nil {
		return err
	}
	if err := e.persist(ctx, ch.pairs); err != nil {
		return err
	}
	e.countIntents(ch.intents)
	for _, u := range ch.pairs {
		e.setPair(u.rule, u.cid, u.next)
	}
	for _, rule := range e.kubeEvents.intents(ch.intents) {
		e.notify(rule) // its Events are written when the controller reconciles it
	}
	return nil
}

// shareProjectRepos gives the install intents of rules of OPERATOR_NAMESPACE the repositories
// of all such intents for the same cluster (events.InstallIntent.ProjectRepos), where there are
// several: argo-syncer then writes a new cluster's AppProject once, with every rule's
// repository, instead of once a rule as each install adds its own.
func shareProjectRepos(intents []events.Event) {
	type project struct{ cluster, identity string }
	byProject := map[project][]*events.InstallIntent{}
	for _, ev := range intents {
		if in, ok := ev.(*events.InstallIntent); ok && in.Grant == nil {
			p := project{in.Cluster.Name, in.Cluster.Identity}
			byProject[p] = append(byProject[p], in)
		}
	}
	for _, ins := range byProject {
		repos := make([]string, 0, len(ins))
		for _, in := range ins {
			repos = append(repos, in.Enforcement.Repo)
		}
		slices.Sort(repos)
		if repos = slices.Compact(repos); len(repos) < 2 {
			continue
		}
		for _, in := range ins {
			in.ProjectRepos = repos
		}
	}
}

// publish sends the intents in order, publishBatch at a time, each batch acknowledged before the
// next is sent.
func (e *engine) publish(ctx context.Context, intents []events.Event) error {
	for start := 0; start < len(intents); start += publishBatch {
		batch := intents[start:min(start+publishBatch, len(intents))]
		if err := e.pub.PublishAll(ctx, batch); err != nil {
			return err
		}
	}
	return nil
}

// countIntents counts published intents by kind (and uninstall reason).
func (e *engine) countIntents(intents []events.Event) {
	for _, ev := range intents {
		switch i := ev.(type) {
		case *events.InstallIntent:
			e.metrics.intents.WithLabelValues("install", "").Inc()
		case *events.UninstallIntent:
			e.metrics.intents.WithLabelValues("uninstall", i.Reason).Inc()
		}
	}
}

// persist stores the pair records, up to persistParallel at a time: a rule over thousands of
// clusters would otherwise wait for thousands of sequential KV round trips. Records of different
// pairs are independent, so their order does not matter.
func (e *engine) persist(ctx context.Context, updates []pairUpdate) error {
	return errors.Join(e.persistEach(ctx, updates)...)
}

// persistEach is persist with each update's error, in the order of updates.
func (e *engine) persistEach(ctx context.Context, updates []pairUpdate) []error {
	errs := make([]error, len(updates))
	if len(updates) == 1 {
		errs[0] = e.persistOne(ctx, updates[0])
		return errs
	}
	sem := make(chan struct{}, persistParallel)
	var wg sync.WaitGroup
	for i, u := range updates {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = e.persistOne(ctx, u)
		})
	}
	wg.Wait()
	return errs
}

// persistOne writes or deletes one pair record.
func (e *engine) persistOne(ctx context.Context, u pairUpdate) error {
	if u.next == nil {
		return e.store.deletePair(ctx, u.rule, u.cid)
	}
	return e.store.putPair(ctx, u.rule, u.cid, u.next)
}
