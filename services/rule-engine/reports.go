package main

// Reports folded together. Install and trigger outcomes and the Applications' health come back
// one an Application: a burst of new clusters brings one of each for every Application it
// created. Each changes one pair's record, which is stored before memory changes. Folded one at
// a time, each would hold the engine's mutex across its own KV round trip, with the cluster
// events that decide new installs waiting behind it. So a handler queues its report and then
// takes the mutex; whoever holds it folds every report queued by then, stores their records side
// by side (persistEach) and applies them. A handler whose report another folded finds it done
// when it gets the mutex. A burst costs a round trip a batch, not one a report
// (BenchmarkOutcomes).

import (
	"context"
	"errors"
	"slices"
	"sync"
)

// reportFold is what a report changes, computed under the mutex from the state as it is: the
// pair records to store, and what to do once they are stored and applied (count it for the
// rule's Kubernetes Events, tell the controller). No updates: the report changes nothing.
type reportFold struct {
	updates []pairUpdate
	then    func()
}

// queuedReport is a report waiting to be folded and, once done, its result.
type queuedReport struct {
	fold func(ctx context.Context) (reportFold, error)
	done bool
	err  error
}

// reportQueue holds the reports waiting for the engine's mutex.
type reportQueue struct {
	mu      sync.Mutex
	waiting []*queuedReport
}

// foldReport queues a report and waits until it is folded: by this call, with every report
// queued when it gets the mutex, or by another call that got the mutex first.
func (e *engine) foldReport(ctx context.Context, fold func(context.Context) (reportFold, error)) error {
	r := &queuedReport{fold: fold}
	e.reports.mu.Lock()
	e.reports.waiting = append(e.reports.waiting, r)
	e.reports.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if !r.done {
		e.foldQueuedReports(ctx)
	}
	return r.err
}

// foldQueuedReports folds the queued reports in rounds. A report that changes a pair an earlier
// report of its round changes waits for the next round, which folds it on the state the earlier
// one left. Like a commit, it runs to the end even when ctx is cancelled, within commitTimeout:
// the reports of other handlers depend on it.
func (e *engine) foldQueuedReports(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	e.reports.mu.Lock()
	queued := e.reports.waiting
	e.reports.waiting = nil
	e.reports.mu.Unlock()
	for len(queued) > 0 {
		queued = e.foldRound(ctx, queued)
	}
}

// foldRound folds the reports whose pairs no earlier report of the round changes, stores their
// records side by side and applies each report whose records were all stored; it returns the
// others. A report whose record could not be stored gets the error and changes nothing in
// memory, so its handler's retry folds it again.
func (e *engine) foldRound(ctx context.Context, queued []*queuedReport) (later []*queuedReport) {
	type folded struct {
		r        *queuedReport
		then     func()
		from, to int // its updates in updates
	}
	var (
		round   []folded
		updates []pairUpdate
		changed = map[[2]string]bool{}
	)
	for _, r := range queued {
		f, err := r.fold(ctx)
		if err != nil {
			r.done, r.err = true, err
			continue
		}
		if slices.ContainsFunc(f.updates, func(u pairUpdate) bool { return changed[[2]string{u.rule, u.cid}] }) {
			later = append(later, r)
			continue
		}
		for _, u := range f.updates {
			changed[[2]string{u.rule, u.cid}] = true
		}
		round = append(round, folded{r: r, then: f.then, from: len(updates), to: len(updates) + len(f.updates)})
		updates = append(updates, f.updates...)
	}
	errs := e.persistEach(ctx, updates)
	for _, f := range round {
		f.r.done = true
		if f.r.err = errors.Join(errs[f.from:f.to]...); f.r.err != nil {
			continue
		}
		for _, u := range updates[f.from:f.to] {
			e.setPair(u.rule, u.cid, u.next)
		}
		if f.then != nil {
			f.then()
		}
	}
	return later
}
