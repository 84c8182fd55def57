package main

// Status. A rule's status is computed from the engine's state on demand (the controller asks
// after a notice): the clusters it matches, what each enforcement's last outcome says, and one
// Ready condition whose reason is the most important thing wrong, in the order of
// pkg/api/v1beta1/conditions.go. Lists are capped and sorted, so the status is stable between
// writes when nothing changed.

import (
	"fmt"
	"maps"
	"slices"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// status computes a rule's status from the state. It returns how long until a time-bound
// condition (source degraded) expires, or 0.
func (e *engine) status(key string, generation int64) (v1beta1.ClusterRuleStatus, time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := v1beta1.ClusterRuleStatus{ObservedGeneration: generation}
	r := e.rules[key]
	if r == nil {
		return st, 0
	}
	cond := metav1Condition(generation)
	if r.invalid != nil {
		cond.Status, cond.Reason, cond.Message = "False", v1beta1.ReasonInvalidSpec, r.invalid.Error()
		st.Conditions = append(st.Conditions, cond)
		return st, 0
	}
	if r.denied != nil {
		// No cluster, no install record: the status of a rule no grant allows names nothing
		// of the fleet.
		cond.Status, cond.Reason, cond.Message = "False", v1beta1.ReasonNotPermitted, r.denied.Error()
		if h := e.held[key]; h != nil {
			cond.Message += "; " + heldMessage(r, h)
		}
		st.Conditions = append(st.Conditions, cond)
		return st, 0
	}
	st.MatchedClusters, st.Clusters = e.matchedClusters(r)

	t := e.tallies[key].enfTally()
	st.InstalledApplications = t.installed
	st.InstallErrorCount = t.installFailed + int32(t.afterFailed)
	st.InstallErrors = t.installErrors[:min(len(t.installErrors), v1beta1.MaxStatusEntries)]

	deg, requeue := e.activeDegradation(r.sel.source.ID)
	cond.Status, cond.Reason, cond.Message = readyCondition(r, &t, deg, st.MatchedClusters)
	h := e.held[key]
	if h != nil && cond.Reason != v1beta1.ReasonTemplateError && cond.Reason != v1beta1.ReasonNotPermitted {
		cond.Status, cond.Reason, cond.Message = "False", v1beta1.ReasonRemovalsHeld, heldMessage(r, h)
	}
	// Counting the pairs of other sources walks all of the rule's pairs: only while a handover waits.
	if h == nil && cond.Reason != v1beta1.ReasonTemplateError && e.handoverWaits(r.sel.source.ID) {
		if waiting := e.foreignPairs(r); waiting > 0 {
			cond.Status, cond.Reason, cond.Message = "False", v1beta1.ReasonSourceHandover, e.handoverMessage(r, waiting)
		}
	}
	if st.Rollout = e.rolloutStatus(r); st.Rollout != nil {
		cond.Status, cond.Reason, cond.Message = rolloutCondition(st.Rollout, cond.Status, cond.Reason, cond.Message)
	}
	st.Conditions = append(st.Conditions, cond)
	return st, requeue
}

// matchedClusters counts the clusters the rule selects in the view (present and selected,
// eligible or not) and lists the first v1beta1.MaxStatusEntries by name. The first call after
// the rule was applied counts them over all of the source's clusters (countMatched); from then
// on the view follows each change of one of the source's clusters (noteMatched). The status is
// computed again after each outcome of the rule, hundreds a second in a burst, under the
// engine's mutex: counting and sorting 10,000 clusters each time was most of the 8 ms a status
// took at 10,000 clusters (BenchmarkRuleStatus; 1.4 ms since).
func (e *engine) matchedClusters(r *ruleState) (int32, []v1beta1.ClusterStatus) {
	if r.matched == nil {
		r.matched = e.countMatched(r)
	}
	return r.matched.count, slices.Clone(r.matched.first)
}

// countMatched selects the rule's clusters among all of its source's and sorts them by name.
func (e *engine) countMatched(r *ruleState) *matchedView {
	var names []v1beta1.ClusterStatus
	for cid := range e.bySource[r.sel.source.ID] {
		if c := &e.clusters[cid].Cluster; r.sel.selects(c) {
			names = append(names, v1beta1.ClusterStatus{Name: c.Name, URL: c.URL})
		}
	}
	slices.SortFunc(names, compareClusterStatus)
	return &matchedView{count: int32(len(names)), first: slices.Clip(names[:min(len(names), v1beta1.MaxStatusEntries)])}
}

// noteMatched keeps the matched views of the source's rules up to date as one of its clusters
// changes from old to now (nil: it appeared, or it is gone). A view it cannot mend exactly (a
// cluster of a full list left it, and which cluster comes next is not known) is dropped, and
// counted again at the next status.
func (e *engine) noteMatched(sourceID string, old, now *events.Cluster) {
	for _, r := range e.rulesBySource[sourceID] {
		m := r.matched
		if m == nil {
			continue
		}
		was, is := old != nil && r.sel.selects(old), now != nil && r.sel.selects(now)
		if was && is && old.Name == now.Name && old.URL == now.URL {
			continue // listed as it was
		}
		if was && !m.remove(old) {
			r.matched = nil
			continue
		}
		if is {
			m.add(now)
		}
	}
}

// matchedView is what matchedClusters counts of a rule's clusters: how many, and the first
// v1beta1.MaxStatusEntries by name. first holds every matched cluster exactly when count equals
// its length.
type matchedView struct {
	count int32
	first []v1beta1.ClusterStatus
}

// add counts a cluster that the rule now selects, and lists it when it is among the first.
func (m *matchedView) add(c *events.Cluster) {
	m.count++
	entry := v1beta1.ClusterStatus{Name: c.Name, URL: c.URL}
	if len(m.first) == v1beta1.MaxStatusEntries && compareStrings(c.Name, m.first[len(m.first)-1].Name) >= 0 {
		return
	}
	at, _ := slices.BinarySearchFunc(m.first, entry, compareClusterStatus)
	m.first = slices.Insert(m.first, at, entry)
	if len(m.first) > v1beta1.MaxStatusEntries {
		m.first = m.first[:v1beta1.MaxStatusEntries]
	}
}

// remove uncounts a cluster the rule selected. It reports false when the list cannot be mended:
// the list is full and the cluster may be on it, so the one to list next is not known.
func (m *matchedView) remove(c *events.Cluster) bool {
	m.count--
	all := int(m.count)+1 == len(m.first)
	if !all {
		return len(m.first) > 0 && compareStrings(c.Name, m.first[len(m.first)-1].Name) > 0
	}
	at := slices.IndexFunc(m.first, func(s v1beta1.ClusterStatus) bool { return s.Name == c.Name && s.URL == c.URL })
	if at < 0 {
		return false
	}
	m.first = slices.Delete(m.first, at, at+1)
	return true
}

// compareClusterStatus orders a status's clusters by name.
func compareClusterStatus(a, b v1beta1.ClusterStatus) int { return compareStrings(a.Name, b.Name) }

// enfTally counts a rule's enforcements by their last outcome.
type enfTally struct {
	installed     int32 // confirmed by argo-syncer
	installFailed int32 // the last install failed
	pending       int   // neither yet
	blocked       int   // held by a failing beforeInstall trigger
	blockedMsg    string
	afterFailed   int // installed, but an afterInstall trigger with failurePolicy Fail failed
	// nameConflicts counts installs argo-syncer refused because another cluster of the same name
	// owns its objects; nameConflictMsg describes the first by cluster/enforcement (nameConflictKey).
	nameConflicts   int
	nameConflictKey string
	nameConflictMsg string
	// installErrors lists the failed installs and afterInstall failures, sorted by
	// cluster/enforcement.
	installErrors []v1beta1.InstallError
}

// ruleTally counts the enforcements of a rule's pairs as the pairs change (engine.setPair, the
// one place they do: a stored pair is never changed in place), so that a status does not walk
// every pair. The status is computed again after each outcome of the rule, under the engine's
// mutex: walking 10,000 pairs for it was 16 % of rule-engine's CPU during the pipeline
// benchmark's create at 10,000 × 10 (BenchmarkRuleStatus: 0.88 ms a status with the walk, 0.26
// ms without). A pair none of whose enforcements has trouble (a failure, a trigger block, an
// afterInstall failure), as nearly every pair, is only counted as installed or pending; the
// others are kept aside, few as they are, for the messages and the list of errors, and tallied
// in full when a status asks.
type ruleTally struct {
	installed, pending int
	troubled           map[string]*pairState // by cluster id
}

// count adds the pair p of cluster cid to the tally (by 1), or takes it out (by -1). A pair
// handed over to another cluster counts for nothing: the successor's pair reports these
// Applications.
func (t *ruleTally) count(cid string, p *pairState, by int) {
	if p.handedOverTo() != "" {
		return
	}
	for _, es := range p.Enforcements {
		if es.trouble != nil {
			if by > 0 {
				if t.troubled == nil {
					t.troubled = map[string]*pairState{}
				}
				t.troubled[cid] = p
			} else {
				delete(t.troubled, cid)
			}
			return
		}
	}
	for _, es := range p.Enforcements {
		if es.Installed {
			t.installed += by
		} else {
			t.pending += by
		}
	}
}

// enfTally is the tally of the rule's enforcements; the zero tally for a rule without pairs.
func (t *ruleTally) enfTally() enfTally {
	if t == nil {
		return enfTally{}
	}
	tally := tallyEnforcements(t.troubled)
	tally.installed += int32(t.installed)
	tally.pending += t.pending
	return tally
}

// tallyEnforcements counts the enforcements of a rule's pairs: installed, failed or pending,
// and trigger blocks and afterInstall failures besides.
func tallyEnforcements(pairs map[string]*pairState) enfTally {
	var t enfTally
	for _, p := range pairs {
		if p.handedOverTo() != "" {
			continue // the successor's pair reports these Applications
		}
		for _, es := range p.Enforcements {
			t.add(p, es)
		}
	}
	slices.SortFunc(t.installErrors, func(a, b v1beta1.InstallError) int {
		return compareStrings(a.Cluster+"/"+a.Enforcement, b.Cluster+"/"+b.Enforcement)
	})
	return t
}

// add counts one enforcement of a pair. The pair's cluster name is read only for the failures
// and blocks it describes: reading it for every pair of a rule was half of the tally's time.
func (t *enfTally) add(p *pairState, es *enfState) {
	name := es.Name
	cluster := func() string { return p.Cluster.Value().Name }
	failed := es.lastFailure()
	switch {
	case es.Installed:
		t.installed++
	case failed != nil:
		t.installFailed++
		t.installErrors = append(t.installErrors, v1beta1.InstallError{Cluster: cluster(), Enforcement: name,
			Reason: failed.Reason, Message: failed.Message, Count: failed.Count})
		if failed.Reason == v1beta1.ReasonNameConflict {
			t.nameConflicts++
			if key := cluster() + "/" + name; t.nameConflictKey == "" || key < t.nameConflictKey {
				t.nameConflictKey = key
				t.nameConflictMsg = fmt.Sprintf("%s on %s: %s", name, cluster(), failed.Message)
			}
		}
	default:
		t.pending++
	}
	if msg := es.triggerBlocked(); msg != "" {
		t.blocked++
		t.blockedMsg = fmt.Sprintf("%s on %s: %s", name, cluster(), msg)
	}
	// An afterInstall trigger that failed under Fail: the Application is installed (and counted
	// so), the failure is listed with the install errors under its own reason.
	if msg := es.afterInstallFailed(); msg != "" && failed == nil {
		t.afterFailed++
		t.installErrors = append(t.installErrors, v1beta1.InstallError{Cluster: cluster(), Enforcement: name,
			Reason: v1beta1.ReasonAfterInstallFailed, Message: msg, Count: 1})
	}
}

// activeDegradation is the source's degradation while it is within degradedTTL, and how long
// until it expires; nil and 0 otherwise.
func (e *engine) activeDegradation(sourceID string) (*degradation, time.Duration) {
	deg := e.degraded[sourceID]
	if deg == nil {
		return nil, 0
	}
	left := deg.at.Add(e.degradedTTL).Sub(e.now())
	if left <= 0 {
		return nil, 0
	}
	return deg, left
}

// readyCondition is the Ready condition's status, reason and message: the most important reason
// wins, in the order of conditions.go.
func readyCondition(r *ruleState, t *enfTally, deg *degradation, matched int32) (status metav1.ConditionStatus, reason, message string) {
	switch {
	case len(r.deniedRenders) > 0:
		cid := slices.Sorted(maps.Keys(r.deniedRenders))[0]
		de := r.deniedRenders[cid]
		return "False", v1beta1.ReasonNotPermitted,
			fmt.Sprintf("renders not permitted on %d cluster(s), which keep what they have; %s: %s", len(r.deniedRenders), de[0], de[1])
	case len(r.templateErrors) > 0:
		cid := slices.Sorted(maps.Keys(r.templateErrors))[0]
		te := r.templateErrors[cid]
		return "False", v1beta1.ReasonTemplateError,
			fmt.Sprintf("templates failed on %d cluster(s); %s: %s", len(r.templateErrors), te[0], te[1])
	case deg != nil && deg.reason == events.DegradedRemovalsHeld:
		return "False", v1beta1.ReasonRemovalsHeld,
			fmt.Sprintf("source %s holds %d removal(s) until an operator releases them: %s", r.sel.source.Kind, len(deg.held), deg.message)
	case deg != nil:
		return "False", v1beta1.ReasonSourceDegraded,
			fmt.Sprintf("source %s: %s: %s", r.sel.source.Kind, deg.reason, deg.message)
	case t.blocked > 0:
		return "False", v1beta1.ReasonTriggerBlocked,
			fmt.Sprintf("%d install(s) held by a failing trigger; %s", t.blocked, t.blockedMsg)
	case t.nameConflicts > 0:
		return "False", v1beta1.ReasonNameConflict,
			fmt.Sprintf("%d install(s) refused: another cluster of the same name owns its Argo CD objects; %s", t.nameConflicts, t.nameConflictMsg)
	case t.installFailed > 0:
		return "False", v1beta1.ReasonInstallFailed,
			fmt.Sprintf("%d install(s) failed; see status.installErrors", t.installFailed)
	case t.afterFailed > 0:
		return "False", v1beta1.ReasonAfterInstallFailed,
			fmt.Sprintf("%d afterInstall trigger(s) with failurePolicy Fail failed after the Application was created; see status.installErrors", t.afterFailed)
	case t.pending > 0:
		return "False", v1beta1.ReasonProgressing,
			fmt.Sprintf("%d install(s) issued, %d confirmed", t.pending+int(t.installed), t.installed)
	case matched == 0:
		return "True", v1beta1.ReasonNoClusters, "no cluster matches the rule yet"
	}
	return "True", v1beta1.ReasonInstalled,
		fmt.Sprintf("%d application(s) installed on %d cluster(s)", t.installed, matched)
}

// compareStrings orders strings for slices.SortFunc.
func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
