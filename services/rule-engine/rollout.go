package main

// Staged rollouts (spec.rollout). A rule with a rollout does not hand a new generation to every
// cluster at once: its steps reach more and more of the rule's clusters, each step's
// Applications must report Healthy and Synced (Argo CD's application controller writes them;
// argo-syncer tells them as application.health events) for the step's bake time before the
// next step starts, a step may wait for an approval, and a Degraded or failed-sync Application
// halts the rollout.
//
// The pairs decide with two compiled rules: the generation being rolled out (the rule as it is)
// and the stable one, the last generation that reached every cluster. evalPairVars asks
// generationFor which of the two a cluster gets: the new one once the rollout has reached the
// cluster, the stable one otherwise (a cluster that appears meanwhile included). Without a
// stable generation (the rule's first, or one the engine never saw complete) a cluster not
// reached keeps what it has.
//
// The rollout's progress is one record per rule in the state bucket ("rollout.<rule>"), written
// before the pairs a move updates, so a crash in between decides the same move again. Moves
// happen in advanceRollout, which the controller calls at every reconcile of the rule (after a
// health event, an approval, a cluster event, a source listing, or when a bake time ends), and
// each move is told on the bus as a rule.rollout.progressed event.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ApproveAnnotation approves steps of a rule's rollout that require approval: a comma-separated
// list of generation/<n>/step/<name>. Only the entries of the generation being rolled out count.
const ApproveAnnotation = "enforcement.globo.com/approve-rollout"

// rolloutSpec is a rule's spec.rollout, compiled.
type rolloutSpec struct {
	steps          []rolloutStep
	maxUnavailable *intstr.IntOrString
	// approvals are the steps the rule's ApproveAnnotation approves for its generation.
	approvals map[string]bool
}

type rolloutStep struct {
	name       string
	selector   labels.Selector // nil for a percentage step
	percentage int
	bake       time.Duration
	approval   bool
}

// compileRollout compiles spec.rollout; nil when the rule has none.
func compileRollout(cr *v1beta1.ClusterRule) (*rolloutSpec, error) {
	ro := cr.Spec.Rollout
	if ro == nil {
		return nil, nil
	}
	if len(ro.Steps) == 0 {
		return nil, errors.New("spec.rollout.steps: at least one step is required")
	}
	out := &rolloutSpec{maxUnavailable: ro.MaxUnavailable, approvals: map[string]bool{}}
	seen := map[string]bool{}
	for i, s := range ro.Steps {
		st := rolloutStep{name: s.Name, approval: s.RequireApproval}
		if st.name == "" {
			st.name = "step-" + strconv.Itoa(i+1)
		}
		if seen[st.name] {
			return nil, fmt.Errorf("spec.rollout.steps[%d].name: %q names two steps", i, st.name)
		}
		seen[st.name] = true
		if s.BakeTime != nil {
			st.bake = s.BakeTime.Duration
		}
		hasLabels := len(s.MatchLabels) > 0 || len(s.MatchExpressions) > 0
		switch {
		case s.Percentage != nil && hasLabels, s.Percentage == nil && !hasLabels:
			return nil, fmt.Errorf("spec.rollout.steps[%d]: a step selects its clusters by labels (matchLabels, matchExpressions) or by percentage: one of the two", i)
		case s.Percentage != nil:
			if *s.Percentage < 1 || *s.Percentage > 100 {
				return nil, fmt.Errorf("spec.rollout.steps[%d].percentage: %d is not within 1 and 100", i, *s.Percentage)
			}
			st.percentage = int(*s.Percentage)
		default:
			sel, err := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchLabels: s.MatchLabels, MatchExpressions: s.MatchExpressions})
			if err != nil {
				return nil, fmt.Errorf("spec.rollout.steps[%d]: %w", i, err)
			}
			st.selector = sel
		}
		out.steps = append(out.steps, st)
	}
	if mu := ro.MaxUnavailable; mu != nil {
		if _, err := intstr.GetScaledValueFromIntOrPercent(mu, 100, false); err != nil {
			return nil, fmt.Errorf("spec.rollout.maxUnavailable: %w", err)
		}
	}
	for _, v := range strings.Split(cr.Annotations[ApproveAnnotation], ",") {
		v = strings.TrimSpace(v)
		gen, step, ok := strings.Cut(strings.TrimPrefix(v, "generation/"), "/step/")
		if ok && strings.HasPrefix(v, "generation/") && gen == strconv.FormatInt(cr.Generation, 10) {
			out.approvals[step] = true
		}
	}
	return out, nil
}

// maxUnavailableOf is how many of a step's n clusters may be updating at once (at least 1).
func (ro *rolloutSpec) maxUnavailableOf(n int) int {
	if ro.maxUnavailable == nil {
		return max(n, 1)
	}
	v, err := intstr.GetScaledValueFromIntOrPercent(ro.maxUnavailable, n, false)
	if err != nil {
		return max(n, 1) // refused when the rule was compiled
	}
	return max(v, 1)
}

// rolloutRecord is a rule's rollout as stored ("rollout.<rule>"). The operator's command line
// reads it (`enforcement rollouts`, `enforcement approve`): its JSON names are a contract.
type rolloutRecord struct {
	UID        string `json:"uid"`
	Generation int64  `json:"generation"`
	// Spec is the generation's spec: it becomes the stable one when the rollout completes.
	Spec v1beta1.ClusterRuleSpec `json:"spec"`
	// StableGeneration and StableSpec are the last generation that reached every cluster.
	StableGeneration int64                    `json:"stableGeneration,omitempty"`
	StableSpec       *v1beta1.ClusterRuleSpec `json:"stableSpec,omitempty"`
	StepNames        []string                 `json:"stepNames"`
	// Step is the current step's index; len(StepNames) once complete.
	Step        int          `json:"step"`
	Phase       string       `json:"phase"`
	Awaiting    string       `json:"awaiting,omitempty"`
	Approved    []string     `json:"approved,omitempty"`
	StepStarted time.Time    `json:"stepStarted,omitzero"`
	BakeStarted time.Time    `json:"bakeStarted,omitzero"`
	Halted      *rolloutHalt `json:"halted,omitempty"`
}

// rolloutHalt names the Application that halted a rollout.
type rolloutHalt struct {
	Application string `json:"application"`
	Cluster     string `json:"cluster"`
	Enforcement string `json:"enforcement"`
	Message     string `json:"message"`
}

// rolloutState is a rule's rollout in memory: the record and the stable generation compiled.
type rolloutState struct {
	rec    rolloutRecord
	stable *ruleState // nil: no stable generation
}

func rolloutKey(rule string) string { return "rollout." + ruleToken(rule) }

// beginRollout makes the rollout of the rule's generation exist before the generation is
// evaluated: a new generation of a rule with spec.rollout starts a rollout from its first step,
// whose stable generation is the last one that reached every cluster (old, the rule as known
// before, when it completed). A rule without spec.rollout drops its record. The record is
// stored before anything is decided from it.
func (e *engine) beginRollout(ctx context.Context, r, old *ruleState) error {
	cur := e.rollouts[r.key]
	if r.invalid != nil {
		//nolint:nilerr // an invalid spec is the rule's state (its status says so): its rollout stands as it was
		return nil
	}
	if r.rollout == nil {
		if cur == nil {
			return nil
		}
		if err := e.store.putRollout(ctx, r.key, nil); err != nil {
			return err
		}
		delete(e.rollouts, r.key)
		e.countRollouts()
		return nil
	}
	if cur != nil && cur.rec.UID == r.ref.UID && cur.rec.Generation == r.ref.Generation {
		// The same rollout (a restart, or a grant change): its stable generation is compiled
		// again under the rule's grant as it is now.
		e.rollouts[r.key] = e.rolloutStateOf(r.key, cur.rec, r)
		return nil
	}
	rec := newRolloutRecord(r, old, cur)
	if err := e.store.putRollout(ctx, r.key, &rec); err != nil {
		return err
	}
	e.rollouts[r.key] = e.rolloutStateOf(r.key, rec, r)
	e.countRollouts()
	e.log.Info("Rollout started", "rule", r.key, "generation", rec.Generation, "stableGeneration", rec.StableGeneration, "steps", rec.StepNames)
	return nil
}

// newRolloutRecord is the record of a new rollout of r, before its first step: its stable
// generation is the last one that reached every cluster, told by the rule's rollout so far
// (cur) or the rule as known before (old).
func newRolloutRecord(r, old *ruleState, cur *rolloutState) rolloutRecord {
	rec := rolloutRecord{UID: r.ref.UID, Generation: r.ref.Generation, Spec: *r.spec.DeepCopy(), Phase: v1beta1.RolloutProgressing}
	for _, s := range r.rollout.steps {
		rec.StepNames = append(rec.StepNames, s.name)
	}
	switch {
	case cur != nil && cur.rec.UID == r.ref.UID && cur.rec.Phase == v1beta1.RolloutComplete:
		rec.StableGeneration, rec.StableSpec = cur.rec.Generation, cur.rec.Spec.DeepCopy()
	case cur != nil && cur.rec.UID == r.ref.UID:
		rec.StableGeneration, rec.StableSpec = cur.rec.StableGeneration, cur.rec.StableSpec
	case old != nil && old.ref.UID == r.ref.UID && old.invalid == nil && old.spec != nil:
		// The rule had no rollout (or the engine never saw one of it): its last generation
		// reached every cluster.
		rec.StableGeneration, rec.StableSpec = old.ref.Generation, old.spec.DeepCopy()
	}
	return rec
}

// rolloutStateOf compiles a record's stable generation, under the grant of r (the rule as it is).
func (e *engine) rolloutStateOf(key string, rec rolloutRecord, r *ruleState) *rolloutState {
	st := &rolloutState{rec: rec}
	if rec.StableSpec == nil || rec.StableGeneration == 0 {
		return st
	}
	ns, name, _ := strings.Cut(key, "/")
	cr := &v1beta1.ClusterRule{Spec: *rec.StableSpec}
	cr.Namespace, cr.Name, cr.UID, cr.Generation = ns, name, types.UID(rec.UID), rec.StableGeneration
	stable := ruleFromSpec(cr, e.operatorNamespaceOf(r))
	if stable.invalid != nil {
		e.log.Warn("Stable generation of the rollout cannot be used; clusters not reached keep what they have", "rule", key, "error", stable.invalid)
		return st
	}
	if r != nil {
		stable.tenant, stable.grant, stable.grantKey, stable.denied = r.tenant, r.grant, r.grantKey, r.denied
		if stable.sel != nil && r.sel != nil {
			stable.sel.grant = r.sel.grant
		}
	}
	// The stable spec, decided by the rule's generation being rolled out.
	stable.specGeneration, stable.ref.Generation = rec.StableGeneration, rec.Generation
	st.stable = stable
	return st
}

func (e *engine) operatorNamespaceOf(r *ruleState) string {
	if r != nil {
		return r.operatorNamespace
	}
	return ""
}

// rolloutPlan is where a rollout stands over the clusters, computed from the state: which step
// each selected and eligible cluster belongs to, and which clusters it has reached.
type rolloutPlan struct {
	steps   [][]string     // cluster ids per step, in rank order; steps[len(r.rollout.steps)]: no step's
	stepOf  map[string]int // cluster id -> step index
	reached map[string]bool
}

// rank orders a rule's clusters for percentage steps: by a hash of the rule's namespace/name
// and the cluster's name, so that every rollout of the rule takes the same clusters first (and a
// preview of a rule not created yet shows the clusters it will take).
func rank(rule, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(rule))
	h.Write([]byte{0})
	h.Write([]byte(name))
	return h.Sum64()
}

// plan computes the rollout plan of r (which has a rollout state st) from the view and the pairs.
func (e *engine) plan(r *ruleState, st *rolloutState) *rolloutPlan {
	type ranked struct {
		cid  string
		rank uint64
		c    *events.Cluster
	}
	var cs []ranked
	for cid := range e.bySource[r.sel.source.ID] {
		c := &e.clusters[cid].Cluster
		if c.Eligible && r.sel.selects(c) {
			cs = append(cs, ranked{cid, rank(r.key, c.Name), c})
		}
	}
	slices.SortFunc(cs, func(a, b ranked) int { return cmp.Or(cmp.Compare(a.rank, b.rank), strings.Compare(a.cid, b.cid)) })
	steps := r.rollout.steps
	p := &rolloutPlan{steps: make([][]string, len(steps)+1), stepOf: make(map[string]int, len(cs)), reached: map[string]bool{}}
	// Steps in order: a label step takes the clusters no earlier step took that match it; a
	// percentage step takes, in rank order, clusters no earlier step took until the steps so
	// far hold its share of the fleet. What no step takes comes last.
	taken := 0
	for j, s := range steps {
		target := len(cs)
		if s.selector == nil {
			target = int(math.Ceil(float64(s.percentage) * float64(len(cs)) / 100))
		}
		for _, c := range cs {
			if taken >= target {
				break
			}
			if _, ok := p.stepOf[c.cid]; ok || s.selector != nil && !s.selector.Matches(labels.Set(c.c.Labels)) {
				continue
			}
			p.stepOf[c.cid] = j
			p.steps[j] = append(p.steps[j], c.cid)
			taken++
		}
	}
	for _, c := range cs {
		if _, ok := p.stepOf[c.cid]; !ok {
			p.stepOf[c.cid] = len(steps)
			p.steps[len(steps)] = append(p.steps[len(steps)], c.cid)
		}
	}
	rec := &st.rec
	for idx := 0; idx < min(rec.Step, len(p.steps)); idx++ {
		for _, cid := range p.steps[idx] {
			p.reached[cid] = true
		}
	}
	if rec.Step >= len(steps) || rec.StepStarted.IsZero() {
		return p
	}
	// The current step: its updated clusters, and as many more, in rank order, as maxUnavailable
	// lets update at once (none while halted).
	cur := p.steps[rec.Step]
	budget := r.rollout.maxUnavailableOf(len(cur))
	var waiting []string
	for _, cid := range cur {
		switch e.pairHealth(r, cid) {
		case pairNotUpdated:
			waiting = append(waiting, cid)
		case pairHealthy:
			p.reached[cid] = true
		default:
			p.reached[cid] = true
			budget--
		}
	}
	if rec.Halted != nil {
		return p
	}
	for _, cid := range waiting[:max(0, min(budget, len(waiting)))] {
		p.reached[cid] = true
	}
	return p
}

// Health of a pair under the generation being rolled out.
const (
	pairNotUpdated = iota // the pair does not run the generation (or has no record)
	pairUpdating          // it does, and not every Application reports Healthy and Synced yet
	pairHealthy           // every Application reports Healthy and Synced for its current spec
	pairFailed            // an Application reports Degraded, or its last sync failed
)

// pairHealth says how a cluster's pair stands under r's generation.
func (e *engine) pairHealth(r *ruleState, cid string) int {
	p := e.pairs[r.key][cid]
	if p == nil || p.specGeneration() != r.ref.Generation || p.Rule.Value().UID != r.ref.UID || len(p.Enforcements) == 0 {
		return pairNotUpdated
	}
	healthy := true
	for _, es := range p.Enforcements {
		if es.failedHealth() {
			return pairFailed
		}
		healthy = healthy && es.healthy()
	}
	if healthy {
		return pairHealthy
	}
	return pairUpdating
}

// healthy reports whether Argo CD reports the enforcement's Application Healthy and Synced, for
// the spec it was last sent.
func (st *enfState) healthy() bool {
	if st.Health == nil || st.Health.SpecHash != st.SpecHash {
		return false
	}
	s := st.Health.Status()
	return s.Observed && s.Health == events.HealthHealthy && s.Sync == events.SyncSynced
}

// failedHealth reports whether Argo CD reports the enforcement's Application Degraded, or its
// last sync failed, for the spec it was last sent.
func (st *enfState) failedHealth() bool {
	if st.Health == nil || st.Health.SpecHash != st.SpecHash {
		return false
	}
	s := st.Health.Status()
	return s.Observed && (s.Health == events.HealthDegraded || s.Operation == events.OperationFailed || s.Operation == events.OperationError)
}

// generationFor is the compiled rule a cluster's pair is evaluated with: r itself, unless r is
// being rolled out and the rollout has not reached the cluster: then the stable generation, or
// nil (the pair keeps what it has) when there is none. A change of source is not staged.
func (e *engine) generationFor(r *ruleState, cid string, ch *change) *ruleState {
	if r == nil || r.rollout == nil || r.invalid != nil {
		return r
	}
	st := e.rollouts[r.key]
	if st == nil || st.rec.UID != r.ref.UID || st.rec.Generation != r.ref.Generation || st.rec.Phase == v1beta1.RolloutComplete {
		return r
	}
	if st.stable != nil && st.stable.sel.source.ID != r.sel.source.ID {
		return r
	}
	if ch.plans == nil {
		ch.plans = map[string]*rolloutPlan{}
	}
	p := ch.plans[r.key]
	if p == nil {
		p = e.plan(r, st)
		ch.plans[r.key] = p
	}
	if p.reached[cid] {
		return r
	}
	return st.stable
}

// advanceRollout moves the rule's rollout as far as the state lets it: a step not started waits
// for its approval or starts; a started step halts on a failed Application, bakes once all its
// clusters run the generation Healthy and Synced, and completes when the bake time has passed;
// after the last step the generation reaches every cluster and becomes the stable one. The
// clusters a move reaches are evaluated and committed with it. It returns how long until a
// bake time ends (0: nothing to wait for).
func (e *engine) advanceRollout(ctx context.Context, key string) (time.Duration, error) {
	var wait time.Duration
	err := e.evaluate(ctx, func(rs *renders) error {
		wait = 0
		defer e.countRollouts()
		r, st := e.rules[key], e.rollouts[key]
		if r == nil || st == nil || r.rollout == nil || r.invalid != nil || r.denied != nil ||
			st.rec.UID != r.ref.UID || st.rec.Generation != r.ref.Generation || st.rec.Phase == v1beta1.RolloutComplete {
			return nil
		}
		prev := st.rec
		next, moves, w := e.nextRollout(r, st)
		wait = w
		st.rec = next
		ch := &change{renders: rs}
		var err error
		if next.Phase == v1beta1.RolloutComplete {
			err = e.completeRollout(ctx, r, st, moves, rs)
		} else {
			err = e.commitRolloutMove(ctx, r, st, &prev, moves, ch)
		}
		if err != nil || len(rs.need) > 0 {
			st.rec = prev
			if err == nil {
				st.stable = e.rolloutStateOf(key, prev, r).stable
			}
		}
		return err
	})
	return wait, err
}

// commitRolloutMove publishes a move's events, stores the record and then evaluates the
// clusters the rollout has reached that do not run the generation yet.
func (e *engine) commitRolloutMove(ctx context.Context, r *ruleState, st *rolloutState, prev *rolloutRecord, moves []events.Event, ch *change) error {
	p := e.plan(r, st)
	for cid := range p.reached {
		if e.pairHealth(r, cid) == pairNotUpdated {
			e.evalPair(r, r.key, cid, e.clusters[cid], 0, ch)
		}
	}
	if len(ch.renders.need) > 0 {
		return nil
	}
	if len(moves) > 0 {
		if err := e.publish(ctx, moves); err != nil {
			return err
		}
	}
	if !rolloutRecordEqual(prev, &st.rec) {
		if err := e.store.putRollout(ctx, r.key, &st.rec); err != nil {
			return err
		}
	}
	if err := e.commit(ctx, ch); err != nil {
		return err
	}
	if len(moves) > 0 || len(ch.pairs) > 0 {
		e.notify(r.key)
	}
	return nil
}

// completeRollout makes the generation the stable one and evaluates the whole rule: the
// clusters no step selected get it, and the removals it makes (through the rule edit breaker).
func (e *engine) completeRollout(ctx context.Context, r *ruleState, st *rolloutState, moves []events.Event, rs *renders) error {
	rec := st.rec
	rec.StableGeneration, rec.StableSpec = rec.Generation, rec.Spec.DeepCopy()
	st.rec, st.stable = rec, nil // complete: every cluster gets r
	// The record first: a stop before the evaluation below finds the rollout complete, and the
	// evaluation of every rule at start carries it out; the other order would send the clusters
	// of no step back to the stable generation.
	if err := e.publish(ctx, moves); err != nil {
		return err
	}
	if err := e.store.putRollout(ctx, r.key, &rec); err != nil {
		return err
	}
	if err := e.evalAndCommit(ctx, r, rs); err != nil || len(rs.need) > 0 {
		return err
	}
	if r.compiled.templated {
		e.purgeRendersLater(r.ref.UID, r.ref.Generation)
	}
	e.log.Info("Rollout complete", "rule", r.key, "generation", rec.Generation)
	e.notify(r.key)
	return nil
}

// nextRollout is the record after the moves the state allows now, the progressed events that
// tell them, and how long until the current step's bake time ends (0: not baking).
func (e *engine) nextRollout(r *ruleState, st *rolloutState) (rolloutRecord, []events.Event, time.Duration) {
	rec := st.rec
	rec.Approved = slices.Clone(rec.Approved)
	moves := &rolloutMoves{rule: r.ref, rec: &rec}
	now := e.now()
	for range len(r.rollout.steps) + 1 {
		if rec.Halted != nil {
			return rec, moves.evs, 0
		}
		if rec.Step >= len(r.rollout.steps) {
			rec.Phase, rec.Awaiting = v1beta1.RolloutComplete, ""
			moves.add(events.RolloutCompleted, nil, nil)
			return rec, moves.evs, 0
		}
		step := r.rollout.steps[rec.Step]
		st.rec = rec // the plan reads the record as it moves
		p := e.plan(r, st)
		if rec.StepStarted.IsZero() {
			if !e.startStep(r, &rec, moves, step, p.steps[rec.Step], now) {
				return rec, moves.evs, 0
			}
			continue // the plan admits the step's clusters now
		}
		if halt := e.failedIn(r, p); halt != nil {
			rec.Halted, rec.Phase = halt, v1beta1.RolloutHalted
			moves.add(events.RolloutHalted, []string{halt.Cluster}, halt)
			e.log.Warn("Rollout halted", "rule", r.key, "generation", rec.Generation, "step", step.name,
				"application", halt.Application, "cluster", halt.Cluster, "message", halt.Message)
			return rec, moves.evs, 0
		}
		if !e.allHealthy(r, p.steps[rec.Step]) {
			rec.Phase, rec.BakeStarted = v1beta1.RolloutProgressing, time.Time{}
			return rec, moves.evs, 0
		}
		if len(p.steps[rec.Step]) > 0 && step.bake > 0 {
			if rec.BakeStarted.IsZero() {
				rec.Phase, rec.BakeStarted = v1beta1.RolloutBaking, now
				moves.add(events.RolloutBaking, nil, nil)
			}
			if left := rec.BakeStarted.Add(step.bake).Sub(now); left > 0 {
				return rec, moves.evs, left
			}
		}
		moves.add(events.RolloutStepCompleted, nil, nil)
		rec.Step++
		rec.StepStarted, rec.BakeStarted, rec.Phase = time.Time{}, time.Time{}, v1beta1.RolloutProgressing
	}
	return rec, moves.evs, 0
}

// startStep starts the step the record stands at, unless it waits for an approval or for the
// rule's source to list its clusters; it reports whether the step started.
func (e *engine) startStep(r *ruleState, rec *rolloutRecord, moves *rolloutMoves, step rolloutStep, cids []string, now time.Time) bool {
	if step.approval && !slices.Contains(rec.Approved, step.name) && !r.rollout.approvals[step.name] {
		if rec.Phase != v1beta1.RolloutAwaitingApproval {
			moves.add(events.RolloutAwaitingApproval, nil, nil)
		}
		rec.Phase, rec.Awaiting = v1beta1.RolloutAwaitingApproval, step.name
		return false
	}
	if !e.sourceListed(r.sel.source.ID) {
		// A step selects from the clusters known: before the source's first complete listing a
		// label step could select none of its clusters and pass at once.
		rec.Phase, rec.Awaiting = v1beta1.RolloutProgressing, ""
		return false
	}
	rec.Phase, rec.Awaiting, rec.StepStarted = v1beta1.RolloutProgressing, "", now
	moves.add(events.RolloutStepStarted, e.clusterNames(cids), nil)
	return true
}

// rolloutMoves collects the progressed events that tell a rollout's moves, each at the step
// the record stands at.
type rolloutMoves struct {
	rule events.RuleRef
	rec  *rolloutRecord
	evs  []events.Event
}

func (m *rolloutMoves) add(phase string, clusters []string, halt *rolloutHalt) {
	ev := &events.RolloutProgressed{Rule: m.rule, StableGeneration: m.rec.StableGeneration, StepIndex: m.rec.Step, Phase: phase}
	if m.rec.Step < len(m.rec.StepNames) {
		ev.Step = m.rec.StepNames[m.rec.Step]
	}
	ev.Clusters = clusters[:min(len(clusters), v1beta1.MaxStatusEntries)]
	if halt != nil {
		ev.Application, ev.Message = halt.Application, halt.Message
	}
	m.evs = append(m.evs, ev)
}

// allHealthy reports whether every one of the clusters runs the rule's generation with every
// Application Healthy and Synced.
func (e *engine) allHealthy(r *ruleState, cids []string) bool {
	for _, cid := range cids {
		if e.pairHealth(r, cid) != pairHealthy {
			return false
		}
	}
	return true
}

// failedIn returns the first failed Application, by cluster name, of the clusters the rollout
// has reached (earlier steps' included); nil when none failed.
func (e *engine) failedIn(r *ruleState, p *rolloutPlan) *rolloutHalt {
	var out *rolloutHalt
	for cid := range p.reached {
		pr := e.pairs[r.key][cid]
		if pr == nil || pr.specGeneration() != r.ref.Generation {
			continue
		}
		for _, es := range pr.Enforcements {
			if !es.failedHealth() {
				continue
			}
			s := es.Health.Status()
			msg := strings.TrimSuffix("sync "+s.Operation+": "+s.Message, ": ")
			if s.Health == events.HealthDegraded {
				msg = strings.TrimSuffix("Degraded: "+s.Message, ": ")
			}
			cluster := pr.Cluster.Value().Name
			h := &rolloutHalt{Application: es.Health.application(cluster, es.Name), Cluster: cluster, Enforcement: es.Name, Message: msg}
			if out == nil || h.Cluster+"/"+h.Enforcement < out.Cluster+"/"+out.Enforcement {
				out = h
			}
		}
	}
	return out
}

// clusterNames are the names of cluster ids, in the order given.
func (e *engine) clusterNames(cids []string) []string {
	out := make([]string, 0, len(cids))
	for _, cid := range cids {
		if rec := e.clusters[cid]; rec != nil {
			out = append(out, rec.Cluster.Name)
		}
	}
	return out
}

// countRollouts sets the rollouts gauge from the rollouts in memory. Call it with e.mu held.
func (e *engine) countRollouts() {
	phases := map[string]int{v1beta1.RolloutProgressing: 0, v1beta1.RolloutBaking: 0,
		v1beta1.RolloutAwaitingApproval: 0, v1beta1.RolloutHalted: 0, v1beta1.RolloutComplete: 0}
	for _, st := range e.rollouts {
		phases[st.rec.Phase]++
	}
	for phase, n := range phases {
		e.metrics.rollouts.WithLabelValues(phase).Set(float64(n))
	}
}

// forgetRollout drops the rollout of a deleted rule, from the bucket and from memory.
func (e *engine) forgetRollout(ctx context.Context, key string) error {
	if e.rollouts[key] == nil {
		return nil
	}
	if err := e.store.putRollout(ctx, key, nil); err != nil {
		return err
	}
	delete(e.rollouts, key)
	e.countRollouts()
	return nil
}

// approveRollout records an operator's approval of a step (RolloutApproved). An approval of a
// generation that is not being rolled out approves nothing (logged).
func (e *engine) approveRollout(ctx context.Context, ev *events.RolloutApproved) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := ev.Rule.Namespace + "/" + ev.Rule.Name
	st := e.rollouts[key]
	if st == nil || st.rec.Generation != ev.Rule.Generation || (ev.Rule.UID != "" && ev.Rule.UID != st.rec.UID) {
		e.log.Warn("Ignored rollout approval: the rule generation is not being rolled out", "rule", key, "generation", ev.Rule.Generation, "step", ev.Step, "by", ev.By)
		return nil
	}
	if !slices.Contains(st.rec.StepNames, ev.Step) {
		e.log.Warn("Ignored rollout approval: the rollout has no such step", "rule", key, "generation", ev.Rule.Generation, "step", ev.Step, "steps", st.rec.StepNames, "by", ev.By)
		return nil
	}
	if slices.Contains(st.rec.Approved, ev.Step) {
		return nil
	}
	rec := st.rec
	rec.Approved = append(slices.Clone(rec.Approved), ev.Step)
	if err := e.store.putRollout(ctx, key, &rec); err != nil {
		return fmt.Errorf("rule %s: %w", key, err)
	}
	st.rec = rec
	e.log.Info("Rollout step approved", "rule", key, "generation", rec.Generation, "step", ev.Step, "by", ev.By)
	e.notify(key)
	return nil
}

// applyHealth records what Argo CD reports for one Application of a pair (ApplicationHealth),
// when it concerns the spec the pair last sent, and tells the rule (its rollout may move).
func (e *engine) applyHealth(ctx context.Context, ev *events.ApplicationHealth) error {
	if err := e.foldReport(ctx, func(context.Context) (reportFold, error) { return e.foldHealth(ev), nil }); err != nil {
		return fmt.Errorf("rule %s/%s: %w", ev.Rule.Namespace, ev.Rule.Name, err)
	}
	return nil
}

// foldHealth is applyHealth's change of the state (reports.go).
func (e *engine) foldHealth(ev *events.ApplicationHealth) reportFold {
	key := ev.Rule.Namespace + "/" + ev.Rule.Name
	var updates []pairUpdate
	for _, cid := range e.pairsNamed(key, ev.Cluster) {
		p := e.pairs[key][cid]
		es := p.Enforcements.get(ev.Enforcement)
		if es == nil {
			continue
		}
		if id, uid := p.Cluster.Value().Identity, p.Rule.Value().UID; (ev.Identity != "" && id != "" && ev.Identity != id) ||
			(ev.Rule.UID != "" && uid != "" && ev.Rule.UID != uid) {
			continue
		}
		h := newAppHealth(ev, p.Cluster.Value().Name, es)
		if es.Health != nil && es.Health.equal(h) {
			continue
		}
		if es.Health == nil && h.Status() == (healthStatus{}) {
			// A new Application's first report, before Argo CD has looked at it, says what no
			// report says (neither healthy nor failed, for any spec): nothing to store.
			continue
		}
		next := p.clone()
		next.Enforcements.get(ev.Enforcement).Health = h
		updates = append(updates, pairUpdate{rule: key, cid: cid, next: next})
	}
	if len(updates) == 0 {
		return reportFold{}
	}
	return reportFold{updates: updates, then: func() {
		if e.rollouts[key] != nil {
			e.notify(key)
		}
	}}
}

// appHealth is the last health Argo CD reported for an enforcement's Application: the spec hash
// it reports on, which is the pair's own, and the status proper, which nearly every Application
// of a fleet has the same of ("Healthy", "Synced", "Succeeded" and the message of a successful
// sync), kept once for all (shared). Every installed Application reports its health, so a copy
// of the status each would cost each pair of a fleet 64 bytes. The Application's name is the
// pair's (events.ApplicationName of its cluster and enforcement) but for an Application named
// otherwise (an earlier version's name), so it is made when needed, not kept: about 40 bytes
// a pair (BenchmarkClusterAppeared). Stored as appHealthRecord.
type appHealth struct {
	SpecHash string
	status   shared[healthStatus]
	// otherName is the Application's name when it is not the pair's; nil nearly always.
	otherName *string
}

// healthStatus is what Argo CD reports of an Application, but for its name and spec hash.
type healthStatus struct {
	// Observed: Argo CD compared the Application's current spec (its status is not the
	// previous spec's).
	Observed  bool   `json:"observed,omitempty"`
	Health    string `json:"health,omitempty"`
	Sync      string `json:"sync,omitempty"`
	Operation string `json:"operation,omitempty"`
	Message   string `json:"message,omitempty"`
}

// newAppHealth is the report of ev for the enforcement state st of a pair of the cluster named
// cluster.
func newAppHealth(ev *events.ApplicationHealth, cluster string, st *enfState) *appHealth {
	return newAppHealthOf(ev.Application, cluster, st, ev.SpecHash, healthStatus{Observed: ev.Observed,
		Health: ev.Health, Sync: ev.Sync, Operation: ev.Operation, Message: ev.Message})
}

// newAppHealthOf is the report on the Application named application, of the enforcement state
// st of a pair of the cluster named cluster; a spec hash equal to the state's, as it is in most
// reports, is that string.
func newAppHealthOf(application, cluster string, st *enfState, specHash string, status healthStatus) *appHealth {
	h := &appHealth{SpecHash: specHash, status: share(status)}
	if specHash == st.SpecHash {
		h.SpecHash = st.SpecHash
	}
	if application != events.ApplicationName(cluster, st.Name) {
		h.otherName = &application
	}
	return h
}

// Status is the reported status.
func (h *appHealth) Status() healthStatus { return h.status.Value() }

// application is the name of the Application reported on, of the enforcement enforcement of a
// pair of the cluster named cluster.
func (h *appHealth) application(cluster, enforcement string) string {
	if h.otherName != nil {
		return *h.otherName
	}
	return events.ApplicationName(cluster, enforcement)
}

// equal reports whether h and o report the same.
func (h *appHealth) equal(o *appHealth) bool {
	return h.SpecHash == o.SpecHash && h.status == o.status &&
		(h.otherName == nil) == (o.otherName == nil) && (h.otherName == nil || *h.otherName == *o.otherName)
}

// appHealthRecord is how an Application's health is stored in its pair's record: the status's
// fields beside the name and spec hash.
type appHealthRecord struct {
	Application string `json:"application"`
	SpecHash    string `json:"specHash"`
	healthStatus
}

// record is the report's stored form, for the enforcement enforcement of a pair of the cluster
// named cluster; nil for none.
func (h *appHealth) record(cluster, enforcement string) *appHealthRecord {
	if h == nil {
		return nil
	}
	return &appHealthRecord{Application: h.application(cluster, enforcement), SpecHash: h.SpecHash, healthStatus: h.Status()}
}

// appHealth is the report a stored record holds for the enforcement state st of a pair of the
// cluster named cluster; nil for none.
func (r *appHealthRecord) appHealth(cluster string, st *enfState) *appHealth {
	if r == nil {
		return nil
	}
	return newAppHealthOf(r.Application, cluster, st, r.SpecHash, r.healthStatus)
}

// rolloutStatus is the status of a rule's rollout, computed from the state; nil without one.
func (e *engine) rolloutStatus(r *ruleState) *v1beta1.RolloutStatus {
	st := e.rollouts[r.key]
	if r.rollout == nil || st == nil || st.rec.UID != r.ref.UID || st.rec.Generation != r.ref.Generation {
		return nil
	}
	rec := &st.rec
	out := &v1beta1.RolloutStatus{Generation: rec.Generation, StableGeneration: rec.StableGeneration, Phase: rec.Phase}
	if rec.Step < len(rec.StepNames) {
		out.Step = rec.StepNames[rec.Step]
	}
	switch {
	case rec.Halted != nil:
		out.Message = fmt.Sprintf("halted at step %s: %s on %s is %s; edit the rule to start a new rollout (a rollback is an edit back)",
			out.Step, rec.Halted.Application, rec.Halted.Cluster, rec.Halted.Message)
	case rec.Phase == v1beta1.RolloutAwaitingApproval:
		out.Message = fmt.Sprintf("step %s waits for an approval: enforcement approve %s %s, or annotate the rule %s=generation/%d/step/%s",
			out.Step, r.key, out.Step, ApproveAnnotation, rec.Generation, out.Step)
	case rec.Phase == v1beta1.RolloutBaking:
		out.Message = fmt.Sprintf("step %s is Healthy and Synced; baking until %s", out.Step,
			rec.BakeStarted.Add(r.rollout.steps[rec.Step].bake).UTC().Format(time.RFC3339))
	case rec.Phase == v1beta1.RolloutProgressing && rec.StepStarted.IsZero() && !e.sourceListed(r.sel.source.ID):
		out.Message = fmt.Sprintf("step %s waits for the rule's %s source to list its clusters: it %s", out.Step,
			r.sel.source.Kind, e.listingMessage(r.sel.source.ID))
	case rec.Phase == v1beta1.RolloutProgressing:
		out.Message = fmt.Sprintf("step %s: waiting for its Applications to report Healthy and Synced", out.Step)
	}
	if rec.Phase != v1beta1.RolloutComplete {
		p := e.plan(r, st)
		for i, s := range r.rollout.steps {
			ss := v1beta1.RolloutStepStatus{Name: s.name, Clusters: int32(len(p.steps[i])), Phase: v1beta1.RolloutPending}
			for _, cid := range p.steps[i] {
				switch e.pairHealth(r, cid) {
				case pairHealthy:
					ss.Updated++
					ss.Healthy++
				case pairUpdating, pairFailed:
					ss.Updated++
				}
			}
			switch {
			case i < rec.Step:
				ss.Phase = v1beta1.RolloutComplete
			case i == rec.Step:
				ss.Phase = rec.Phase
				if !rec.StepStarted.IsZero() {
					ss.StartedAt = &metav1.Time{Time: rec.StepStarted}
				}
				if !rec.BakeStarted.IsZero() {
					ss.BakeStartedAt = &metav1.Time{Time: rec.BakeStarted}
				}
			}
			out.Steps = append(out.Steps, ss)
		}
	}
	byGen := map[int64][]string{}
	for _, p := range e.pairs[r.key] {
		if p.handedOverTo() == "" {
			byGen[p.specGeneration()] = append(byGen[p.specGeneration()], p.Cluster.Value().Name)
		}
	}
	for _, g := range slices.Sorted(maps.Keys(byGen)) {
		names := byGen[g]
		slices.Sort(names)
		out.Generations = append(out.Generations, v1beta1.GenerationClusters{Generation: g, Count: int32(len(names)),
			Clusters: names[:min(len(names), v1beta1.MaxStatusEntries)]})
	}
	return out
}

// rolloutRecordEqual reports whether two records say the same.
func rolloutRecordEqual(a, b *rolloutRecord) bool {
	return a.Generation == b.Generation && a.Step == b.Step && a.Phase == b.Phase && a.Awaiting == b.Awaiting &&
		a.StepStarted.Equal(b.StepStarted) && a.BakeStarted.Equal(b.BakeStarted) && slices.Equal(a.Approved, b.Approved) &&
		(a.Halted == nil) == (b.Halted == nil) && a.StableGeneration == b.StableGeneration
}

// rolloutCondition ranks a rollout in the Ready condition (status, reason, message as computed
// without it): a halt comes right after a degraded source, an awaited approval and a rollout
// under way rank below every install problem, above Progressing.
func rolloutCondition(ro *v1beta1.RolloutStatus, status metav1.ConditionStatus, reason, message string) (metav1.ConditionStatus, string, string) {
	switch reason {
	case v1beta1.ReasonInvalidSpec, v1beta1.ReasonNotPermitted, v1beta1.ReasonTemplateError, v1beta1.ReasonRemovalsHeld,
		v1beta1.ReasonSourceHandover, v1beta1.ReasonSourceDegraded:
		return status, reason, message
	}
	switch ro.Phase {
	case v1beta1.RolloutHalted:
		return "False", v1beta1.ReasonRolloutHalted, ro.Message
	case v1beta1.RolloutComplete:
		return status, reason, message
	}
	switch reason {
	case v1beta1.ReasonTriggerBlocked, v1beta1.ReasonNameConflict, v1beta1.ReasonInstallFailed, v1beta1.ReasonAfterInstallFailed:
		return status, reason, message
	}
	if ro.Phase == v1beta1.RolloutAwaitingApproval {
		return "False", v1beta1.ReasonRolloutAwaitingApproval, ro.Message
	}
	return "False", v1beta1.ReasonRollingOut, ro.Message
}

// oldestLiveGeneration is the oldest generation of r whose renders may still be read: the
// stable generation of a rollout under way, else r's own.
func (e *engine) oldestLiveGeneration(r *ruleState) int64 {
	if st := e.rollouts[r.key]; st != nil && st.stable != nil && st.rec.Generation == r.ref.Generation && st.rec.StableGeneration > 0 {
		return min(st.rec.StableGeneration, r.ref.Generation)
	}
	return r.ref.Generation
}

// previewRollout sets up, on a preview's scratch engine, the rollout applying r would start:
// its record before the first step, then the first move (the first step starts unless it needs
// an approval). A rule whose rollout is under way (an explanation, or a preview of the live
// spec) keeps it. Nothing is stored. nil when r has no rollout.
func (e *engine) previewRollout(r, live *ruleState) *rolloutState {
	if r.rollout == nil {
		return nil
	}
	cur := e.rollouts[r.key]
	if cur != nil && cur.rec.UID == r.ref.UID && cur.rec.Generation == r.ref.Generation {
		st := e.rolloutStateOf(r.key, cur.rec, r)
		e.rollouts[r.key] = st
		return st
	}
	st := e.rolloutStateOf(r.key, newRolloutRecord(r, live, cur), r)
	e.rollouts[r.key] = st
	next, _, _ := e.nextRollout(r, st)
	st.rec = next
	return st
}

// stepNames maps the names of the clusters r's rollout reaches to their step's name ("" for
// the clusters no step selects: they get the generation when the rollout completes).
func (e *engine) stepNames(r *ruleState, st *rolloutState) map[string]string {
	p := e.plan(r, st)
	out := make(map[string]string, len(p.stepOf))
	for cid, idx := range p.stepOf {
		if idx < len(r.rollout.steps) {
			out[e.clusters[cid].Cluster.Name] = r.rollout.steps[idx].name
		} else {
			out[e.clusters[cid].Cluster.Name] = ""
		}
	}
	return out
}

// generationOn is the generation whose spec the rule runs on the cluster of that name (0: none).
func (e *engine) generationOn(rule, name string) int64 {
	for _, cid := range e.pairsNamed(rule, name) {
		if p := e.pairs[rule][cid]; p.handedOverTo() == "" {
			return p.specGeneration()
		}
	}
	return 0
}

// stagedChanges merges a preview's changes made now with those the rollout makes later (the
// evaluation of the rollout complete), each marked with the step that makes it.
func stagedChanges(now, later []events.PreviewChange, steps map[string]string) []events.PreviewChange {
	key := func(c events.PreviewChange) string { return c.Cluster + "\x00" + c.Enforcement + "\x00" + c.Action }
	seen := map[string]bool{}
	out := make([]events.PreviewChange, 0, len(later))
	for _, c := range now {
		c.Step = steps[c.Cluster]
		seen[key(c)] = true
		out = append(out, c)
	}
	for _, c := range later {
		if !seen[key(c)] {
			c.Step, c.Staged = steps[c.Cluster], true
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(a, b events.PreviewChange) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Enforcement, b.Enforcement))
	})
	return out
}

// rolloutView is r's rollout as previews and explanations show it.
func (e *engine) rolloutView(r *ruleState, st *rolloutState) *events.RolloutView {
	s := e.rolloutStatus(r)
	if s == nil {
		return nil
	}
	v := &events.RolloutView{Generation: s.Generation, StableGeneration: s.StableGeneration, Phase: s.Phase, Step: s.Step, Message: s.Message}
	p := e.plan(r, st)
	for i, step := range r.rollout.steps {
		sv := events.RolloutStepView{Name: step.name, Phase: v1beta1.RolloutComplete, Clusters: e.clusterNames(p.steps[i]),
			RequireApproval: step.approval, BakeSeconds: int64(step.bake / time.Second)}
		slices.Sort(sv.Clusters)
		if i < len(s.Steps) {
			sv.Phase, sv.Updated, sv.Healthy = s.Steps[i].Phase, int(s.Steps[i].Updated), int(s.Steps[i].Healthy)
		}
		v.Steps = append(v.Steps, sv)
	}
	return v
}
