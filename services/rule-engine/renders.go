package main

// Rendering outside the mutex. Deciding what a pair needs is quick and runs under the engine's
// mutex; rendering a template may take up to TEMPLATE_RENDER_TIMEOUT, and holding the mutex for
// it would stall every other rule's events (a runaway template over 200 clusters once froze the
// engine for half an hour). So an entry point evaluates in steps (engine.evaluate): a step that
// finds renders missing changes nothing and returns them; they are made with the mutex released,
// in parallel, each within its own TEMPLATE_RENDER_TIMEOUT; then the step runs again on the
// state as it is by then. A render depends only on the rule generation and the cluster's
// variables (its render key), never on the rest of the state, so a render made for one step is
// valid in the next, and every decision is still taken and committed under the mutex.
//
// A render a guard stopped (past TEMPLATE_RENDER_TIMEOUT, output over the cap) is remembered in
// the render cache bucket, keyed by rule generation and cluster: neither a later event nor a
// restart renders it again until the rule changes.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"runtime"
	"sync"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// renderParallel bounds the renders one input makes at once: twice the CPUs, since a runaway
// template keeps a CPU busy until its limit and the other rules' events need some too. Each
// render ends within TEMPLATE_RENDER_TIMEOUT, so an input over n failing clusters takes about
// n/renderParallel times that, without holding the mutex.
var renderParallel = 2 * runtime.GOMAXPROCS(0)

// renders carries renders between the evaluation steps of one input: the outcomes made so
// far, by render key, and the ones the last step found missing.
type renders struct {
	done map[string]renderOutcome
	need []renderJob
}

func newRenders() *renders { return &renders{done: map[string]renderOutcome{}} }

// renderOutcome is a render's result: the enforcements, or the template error.
type renderOutcome struct {
	enfs []events.Enforcement
	err  error
}

// renderJob is one render to make outside the mutex. It holds copies of what it reads, so it
// shares nothing with the engine's state.
type renderJob struct {
	key        string // render cache key: <uid>.<generation>.<variables hash>
	failureKey string // where a stopped render is remembered: <uid>.<generation>.failed-<cluster hash>
	rule       string // namespace/name, for logs
	cluster    string // name, for logs
	compiled   *compiledRule
	vars       map[string]any
}

// failureToken is the cluster part of a remembered failure's key.
func failureToken(cid string) string {
	sum := sha256.Sum256([]byte(cid))
	return "failed-" + hex.EncodeToString(sum[:8])
}

// evaluate runs step under the engine's mutex with the renders made so far, until a step
// needs none it does not have. A step that needs renders (rs.need not empty after it) must
// have changed nothing; the renders are then made with the mutex released and step runs again.
// An error from step, or ctx ending while rendering, ends it.
func (e *engine) evaluate(ctx context.Context, step func(rs *renders) error) error {
	rs := newRenders()
	for {
		rs.need = nil
		e.mu.Lock()
		err := step(rs)
		e.mu.Unlock()
		if err != nil || len(rs.need) == 0 {
			return err
		}
		if err := e.renderAll(ctx, rs); err != nil {
			return err
		}
	}
}

// renderAll makes the renders rs needs, renderParallel at a time, and returns when every one
// has stopped. When ctx ends meanwhile nothing is kept and ctx's error is returned: the input
// is retried, and no template is blamed for the stop.
func (e *engine) renderAll(ctx context.Context, rs *renders) error {
	out := make([]renderOutcome, len(rs.need))
	sem := make(chan struct{}, renderParallel)
	var wg sync.WaitGroup
	for i := range rs.need {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i] = e.renderOne(ctx, &rs.need[i])
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("render: %w", err)
	}
	for i := range rs.need {
		rs.done[rs.need[i].key] = out[i]
	}
	return nil
}

// renderOne makes one render: a failure remembered for the rule generation and cluster is
// returned as it is, then the render cache is read, and only then is the template rendered
// (and the result cached, or a stopped render remembered). A cache read error is not fatal:
// rendering again is correct, only maybe not identical for a non-deterministic template.
func (e *engine) renderOne(ctx context.Context, j *renderJob) renderOutcome {
	if msg, ok, err := e.store.getFailure(ctx, j.failureKey); err == nil && ok {
		e.metrics.renders.WithLabelValues("failed").Inc()
		return renderOutcome{err: fmt.Errorf("%s (remembered from an earlier render of this rule generation: not rendered again until the rule changes)", msg)}
	}
	if enfs, ok, err := e.store.getRender(ctx, j.key); err == nil && ok {
		e.metrics.renders.WithLabelValues("hit").Inc()
		return renderOutcome{enfs: enfs}
	}
	e.metrics.renders.WithLabelValues("miss").Inc()
	enfs, err := e.renderer.renderSafely(ctx, j.compiled, j.vars)
	if ctx.Err() != nil {
		return renderOutcome{err: ctx.Err()} // not the template's doing; renderAll drops it
	}
	if err != nil {
		e.metrics.renderErrors.Inc()
		if isRenderLimit(err) {
			e.log.Warn("Template render stopped", "rule", j.rule, "cluster", j.cluster, "error", err)
			if perr := e.store.putFailure(ctx, j.failureKey, err.Error()); perr != nil {
				e.log.Warn("Template failure not remembered", "rule", j.rule, "cluster", j.cluster, "error", perr)
			}
		}
		return renderOutcome{err: err}
	}
	enfs, err = e.store.putRender(ctx, j.key, enfs)
	if err != nil {
		e.log.Warn("Render not cached", "rule", j.rule, "error", err)
	}
	return renderOutcome{enfs: enfs}
}

// deepCopy copies the maps and slices of JSON-like data (what cluster attributes are), so a
// render outside the mutex shares nothing a template could change with the engine's view.
func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[k] = deepCopy(x)
		}
		return m
	case []any:
		s := make([]any, len(t))
		for i, x := range t {
			s[i] = deepCopy(x)
		}
		return s
	case map[string]string: // labels
		return maps.Clone(t)
	}
	return v
}
