package main

// Persistence. The rule engine's memory (which clusters exist, what each (rule, cluster) pair
// was last told to install) must survive a restart: the durable consumer does not redeliver
// acknowledged cluster events, and the diff against "what was installed" is what turns a changed
// rule into install and uninstall intents. Both live in a KV bucket of the rule engine's own
// (events.BucketRuleEngineState: the cluster view "cluster.<cid>", the per-(rule, cluster)
// install records "pair.<rule>.<cid>", the degraded sources "degraded.<source id>", the
// selection removals a rule edit held "held.<rule>" and the sources' complete listings
// "listed.<source id>"), written after the intents are published and before the
// event is acknowledged, so a crash in between replays the event and republishes the same
// (deduplicated) intents. Rendered enforcements are cached in events.BucketRenderCache, next to
// the renders a guard stopped ("<uid>.<generation>.failed-<cluster hash>", see renders.go). Both
// buckets are declared by the shared topology, which creates them.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unique"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
	"github.com/nats-io/nats.go/jetstream"
)

// clusterRecord is one cluster of the view, with the inventory revision it was last seen at.
type clusterRecord struct {
	Cluster  events.Cluster `json:"cluster"`
	Revision uint64         `json:"revision"`
	// Sequence is the decision sequence (events.Meta.DecisionSequence) of the cluster event
	// that wrote the record; 0 in records stored before it was kept.
	Sequence uint64 `json:"sequence,omitempty"`
	// templateAttributes holds, JSON-encoded, the attributes that only templates read, once the
	// record is in the engine's view (compact); Cluster.Attributes then keeps the ones read at
	// every decision. Read them all through attributes.
	templateAttributes []byte
	// templateHash is the hash of the cluster's template variables (varsHash), once compact:
	// a decision needs only the hash when the render is known.
	templateHash string
}

// compact moves the attributes only templates read out of Cluster.Attributes into
// templateAttributes: a decoded Rancher cluster's attributes take about 3 KB in maps, their JSON
// a quarter of it, and the engine keeps every cluster of every source. Selection (an OCM
// cluster's claims, a ClusterProfile's properties) and registration (argocd.*) read theirs at
// every decision and keep them decoded.
func (r *clusterRecord) compact() {
	if r.templateAttributes != nil {
		return
	}
	var kept, others map[string]any
	for k, v := range r.Cluster.Attributes {
		if k == ocmClaimsAttribute || k == clusterProfilePropertiesAttribute || strings.HasPrefix(k, RegistrationPrefix) {
			if kept == nil {
				kept = map[string]any{}
			}
			kept[k] = v
		} else {
			if others == nil {
				others = map[string]any{}
			}
			others[k] = v
		}
	}
	if others == nil {
		return
	}
	b, err := json.Marshal(others)
	if err != nil {
		return // not from JSON (a test's value): kept decoded
	}
	r.templateHash = varsHash(r.templateVars())
	r.Cluster.Attributes, r.templateAttributes = kept, b
}

// templateVars returns the variables a template sees for the cluster.
func (r *clusterRecord) templateVars() map[string]any {
	c := r.Cluster
	c.Attributes = r.attributes()
	return templateVars(&c)
}

// attributes returns all of the cluster's attributes, as the event that brought it decoded them.
func (r *clusterRecord) attributes() map[string]any {
	if r.templateAttributes == nil {
		return r.Cluster.Attributes
	}
	var all map[string]any
	if err := json.Unmarshal(r.templateAttributes, &all); err != nil {
		panic(fmt.Sprintf("cluster %s: attributes encoded by compact do not decode: %v", r.Cluster.Name, err))
	}
	maps.Copy(all, r.Cluster.Attributes)
	return all
}

// MarshalJSON writes the record with every attribute, compact or not: the stored records are
// the same either way.
func (r clusterRecord) MarshalJSON() ([]byte, error) {
	type record clusterRecord // without this method
	whole := record(r)
	whole.Cluster.Attributes = r.attributes()
	return json.Marshal(whole)
}

// newerThan reports whether the record is newer than a cluster event of inventory revision
// revision and decision sequence seq, which is then a stale redelivery or replay to ignore.
// The stream orders the events of one cluster as the scanner wrote them, and keeps that order
// when its inventory bucket was lost and recreated, whereas the inventory's revisions then
// start again at 1: by revision alone every event of the new inventory would look older than
// the engine's record and the cluster would stay frozen. So the decision sequences decide
// where both are known (0: a record from before they were kept, or a direct call), else the
// revisions.
func (r *clusterRecord) newerThan(revision, seq uint64) bool {
	switch {
	case r == nil:
		return false
	case r.Sequence != 0 && seq != 0:
		return r.Sequence > seq
	default:
		return r.Revision > revision
	}
}

// pairState is what a (rule, cluster) pair was last told to install, and what came of it.
//
// Its rule reference and its target are the same for many pairs (every pair of a rule
// generation; every pair of a cluster revision and credentials reference), so a pair holds each
// as a shared value, a handle on one copy: 16 bytes a pair instead of 224, about 1.6 KB a cluster
// at ten rules (BenchmarkClusterAppeared). So it does its terms (pairTerms). It is stored as a
// pairRecord.
type pairState struct {
	Rule    shared[events.RuleRef]
	Cluster sharedTarget
	// RenderKey is the (generation, variables) the enforcements were last rendered for; the
	// same key means nothing to render and nothing to send.
	RenderKey    string
	Enforcements enfStates
	terms        shared[pairTerms]
}

// pairTerms are the terms of a pair beside its rule and target, the same for every pair of a
// rule but for the few handed over: one shared copy, 8 bytes a pair where the fields took 56.
type pairTerms struct {
	// deletionPolicy is the rule's deletion policy the pair was installed under.
	deletionPolicy string
	// grant is the fingerprint of the ClusterRuleGrant the pair was installed under
	// (tenancy.go); empty for a rule of OPERATOR_NAMESPACE. A changed grant sends the pair's
	// installs again.
	grant string
	// specGeneration is the rule generation whose spec the pair runs when it is not
	// Rule.Generation: a staged rollout's stable generation, decided (and sent) by the rule at
	// Rule.Generation for a cluster the rollout has not reached (rollout.go).
	specGeneration int64
	// handedOverTo is set on a pair of the rule's old source that a cluster of its new source
	// (this cluster id) took over (handover.go): the record keeps the enforcements argo-syncer
	// has not confirmed for the new cluster yet, so a refused takeover orphans nothing.
	handedOverTo string
}

// deletionPolicy is the rule's deletion policy the pair was installed under.
func (p *pairState) deletionPolicy() string { return p.terms.Value().deletionPolicy }

// grant is the fingerprint of the grant the pair was installed under (pairTerms.grant).
func (p *pairState) grant() string { return p.terms.Value().grant }

// handedOverTo is the cluster id that took the pair over (pairTerms.handedOverTo); "" when none.
func (p *pairState) handedOverTo() string { return p.terms.Value().handedOverTo }

// handOverTo marks the pair as taken over by cluster cid.
func (p *pairState) handOverTo(cid string) {
	t := p.terms.Value()
	t.handedOverTo = cid
	p.terms = share(t)
}

// shared is a value many pairs hold the same of, kept once: a pair holds a handle on it (package
// unique), and the value goes once no handle is left. The zero shared holds T's zero value.
// Records hold the value itself (pairRecord).
type shared[T comparable] struct{ h unique.Handle[T] }

func share[T comparable](v T) shared[T] { return shared[T]{unique.Make(v)} }

// Value is a copy of the shared value.
func (s shared[T]) Value() T {
	if s.h == (unique.Handle[T]{}) {
		var zero T
		return zero
	}
	return s.h.Value()
}

// sharedTarget is a pair's target shared: the events.Target of its intents without the
// registration hints (which the intents take from the cluster's record, withRegistration) and
// so comparable.
type sharedTarget struct{ s shared[targetValue] }

// targetValue is the comparable part of an events.Target: all of it but Registration.
type targetValue struct {
	name, key, url     string
	source             events.SourceRef
	identity, replaces string
	revision           uint64
	gone               bool
}

func shareTarget(t events.Target) sharedTarget {
	return sharedTarget{share(targetValue{name: t.Name, key: t.Key, url: t.URL, source: t.Source,
		identity: t.Identity, replaces: t.Replaces, revision: t.Revision, gone: t.Gone})}
}

// Value is a copy of the target, without Registration.
func (t sharedTarget) Value() events.Target {
	v := t.s.Value()
	return events.Target{Name: v.name, Key: v.key, URL: v.url, Source: v.source, Identity: v.identity,
		Replaces: v.replaces, Revision: v.revision, Gone: v.gone}
}

// specGeneration is the rule generation whose spec the pair runs.
func (p *pairState) specGeneration() int64 {
	if g := p.terms.Value().specGeneration; g != 0 {
		return g
	}
	return p.Rule.Value().Generation
}

// enfState is one installed enforcement (by rendered name) of a pair.
type enfState struct {
	// Name is the enforcement's rendered name, the key it is stored under.
	Name     string
	SpecHash string
	// intent is the id of the install intent the state was last sent as (intentID, isIntent).
	intent    intentID
	Installed bool
	// outcomeSucceeded says that the last outcome applied (lastOutcome) is the current intent's
	// install succeeded event, as it nearly always is: its id is then "install-succeeded:" and
	// the intent id, not a string of its own.
	outcomeSucceeded bool
	// lastOutcome is the id of the last outcome event applied, so a redelivery counts once
	// (lastOutcomeID); "" when outcomeSucceeded says it.
	lastOutcome string
	// Health is what Argo CD last reported for the Application (application.health), for the
	// spec hash it names; staged rollouts wait for it (rollout.go).
	Health *appHealth
	// trouble is what went wrong or holds the install back; nil, as for nearly every pair, while
	// nothing does. It is never changed in place (changeTrouble).
	trouble *enfTrouble
}

// enfTrouble is the rarely set part of an enforcement's state, kept apart so that each of a
// fleet's pairs does not carry its empty fields (40 bytes an enforcement).
type enfTrouble struct {
	// Failure is the last install failure of this intent, with a count; Count 0 when none.
	Failure failure
	// TriggerBlocked is the message of a failurePolicy=Fail beforeInstall trigger that holds the
	// install.
	TriggerBlocked string
	// AfterInstallFailed is the message of a failurePolicy=Fail afterInstall trigger that failed
	// after the Application was created: nothing is held, but the rule reports it.
	AfterInstallFailed string
}

type failure struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Count   int32  `json:"count"`
}

// lastFailure is the last install failure of the current intent; nil when there is none.
func (st *enfState) lastFailure() *failure {
	if st.trouble == nil || st.trouble.Failure.Count == 0 {
		return nil
	}
	return &st.trouble.Failure
}

// triggerBlocked is the message of the beforeInstall trigger failure that holds the install.
func (st *enfState) triggerBlocked() string {
	if st.trouble == nil {
		return ""
	}
	return st.trouble.TriggerBlocked
}

// afterInstallFailed is the message of the afterInstall trigger failure the rule reports.
func (st *enfState) afterInstallFailed() string {
	if st.trouble == nil {
		return ""
	}
	return st.trouble.AfterInstallFailed
}

// changeTrouble applies change to a copy of the state's trouble and keeps the copy, or nothing
// when it is left empty. Copies of the state (cloneState) share their trouble safely.
func (st *enfState) changeTrouble(change func(*enfTrouble)) {
	var t enfTrouble
	if st.trouble != nil {
		t = *st.trouble
	}
	change(&t)
	if t == (enfTrouble{}) {
		st.trouble = nil
	} else {
		st.trouble = &t
	}
}

// enfStateRecord is how an enforcement's state is stored, the form records had when its
// trouble was kept in line.
type enfStateRecord struct {
	SpecHash           string           `json:"specHash"`
	IntentID           string           `json:"intentId"`
	Installed          bool             `json:"installed,omitempty"`
	Failure            *failure         `json:"failure,omitempty"`
	TriggerBlocked     string           `json:"triggerBlocked,omitempty"`
	AfterInstallFailed string           `json:"afterInstallFailed,omitempty"`
	LastOutcome        string           `json:"lastOutcome,omitempty"`
	Health             *appHealthRecord `json:"health,omitempty"`
}

// record is the state's stored form, in a pair of the cluster named cluster.
func (st *enfState) record(cluster string) *enfStateRecord {
	id := st.intentID()
	return &enfStateRecord{SpecHash: st.SpecHash, IntentID: id, Installed: st.Installed,
		Failure: st.lastFailure(), TriggerBlocked: st.triggerBlocked(), AfterInstallFailed: st.afterInstallFailed(),
		LastOutcome: st.lastOutcomeOf(id), Health: st.Health.record(cluster, st.Name)}
}

// state is the state the record holds, of the enforcement of that name in a pair of the cluster
// named cluster.
func (r *enfStateRecord) state(name, cluster string) *enfState {
	st := &enfState{Name: name, SpecHash: r.SpecHash, Installed: r.Installed}
	st.Health = r.Health.appHealth(cluster, st)
	st.setIntent(r.IntentID)
	st.recordOutcome(r.LastOutcome)
	st.changeTrouble(func(t *enfTrouble) {
		if r.Failure != nil {
			t.Failure = *r.Failure
			t.Failure.Count = max(t.Failure.Count, 1) // a recorded failure counts at least once
		}
		t.TriggerBlocked, t.AfterInstallFailed = r.TriggerBlocked, r.AfterInstallFailed
	})
	return st
}

// pairRecord is how a pair is stored: plain values, encoded in one pass. Encoded through the
// pair's own values' JSON methods, each level's output was validated and copied again by the
// level above, 16 – 20 µs a pair for every decision and outcome (BenchmarkPairRecordEncode).
type pairRecord struct {
	Rule           events.RuleRef             `json:"rule"`
	Cluster        events.Target              `json:"cluster"`
	RenderKey      string                     `json:"renderKey"`
	DeletionPolicy string                     `json:"deletionPolicy,omitempty"`
	Enforcements   map[string]*enfStateRecord `json:"enforcements"`
	HandedOverTo   string                     `json:"handedOverTo,omitempty"`
	Grant          string                     `json:"grant,omitempty"`
	SpecGeneration int64                      `json:"specGeneration,omitempty"`
}

// record is the pair's stored form.
func (p *pairState) record() *pairRecord {
	t, target := p.terms.Value(), p.Cluster.Value()
	return &pairRecord{Rule: p.Rule.Value(), Cluster: target, RenderKey: p.RenderKey, DeletionPolicy: t.deletionPolicy,
		Enforcements: p.Enforcements.records(target.Name), HandedOverTo: t.handedOverTo, Grant: t.grant, SpecGeneration: t.specGeneration}
}

func (p *pairState) MarshalJSON() ([]byte, error) { return json.Marshal(p.record()) }

func (p *pairState) UnmarshalJSON(b []byte) error {
	var r pairRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	states, err := statesOf(r.Enforcements, r.Cluster.Name)
	if err != nil {
		return err
	}
	*p = pairState{Rule: share(r.Rule), Cluster: shareTarget(r.Cluster), RenderKey: r.RenderKey, Enforcements: states,
		terms: share(pairTerms{deletionPolicy: r.DeletionPolicy, grant: r.Grant, specGeneration: r.SpecGeneration, handedOverTo: r.HandedOverTo})}
	return nil
}

func (p *pairState) clone() *pairState {
	c := *p
	c.Enforcements = make(enfStates, len(p.Enforcements))
	for i, st := range p.Enforcements {
		c.Enforcements[i] = st.cloneState()
	}
	return &c
}

// intentID is an install intent's id kept in two shared parts. The id is
// "install:<rule namespace>:<rule name>:<generation>:<cluster>:<revision>:<enforcement>:<spec
// hash>" (events.InstallIntent.ID, each token escaped): its rule part, up to the generation, is
// the same for every intent of a rule generation, its cluster part, up to the revision, for
// every intent to a cluster at one revision, and the rest is the state's own name and spec hash.
// An id as a string of its own took 96 bytes a pair. An id of another form (none is made, but
// a stored record is read as it is) is kept whole in rule, with cluster zero; the zero intentID
// is the empty id.
type intentID struct {
	rule, cluster unique.Handle[string]
}

// setIntent keeps id as the state's intent id, in parts when it is the install intent id of
// the state's name and spec hash (set SpecHash first).
func (st *enfState) setIntent(id string) {
	st.intent = intentID{}
	if id == "" {
		return
	}
	rule, cluster, tail, ok := splitIntentID(id)
	if !ok || tail != events.EscapeToken(st.Name)+":"+events.EscapeToken(st.SpecHash) {
		st.intent.rule = unique.Make(id)
		return
	}
	st.intent = intentID{rule: unique.Make(rule), cluster: unique.Make(cluster)}
}

// splitIntentID cuts an install intent's id after its fourth and its sixth colon: the rule
// part, the cluster part and the rest (escaped tokens hold no colon).
func splitIntentID(id string) (rule, cluster, tail string, ok bool) {
	cut := func(s string, colons int) int {
		at := 0
		for range colons {
			i := strings.IndexByte(s[at:], ':')
			if i < 0 {
				return -1
			}
			at += i + 1
		}
		return at
	}
	r := cut(id, 4)
	if r < 0 || !strings.HasPrefix(id, "install:") {
		return "", "", "", false
	}
	c := cut(id[r:], 2)
	if c < 0 {
		return "", "", "", false
	}
	return id[:r], id[r : r+c], id[r+c:], true
}

// intentID is the id of the install intent the state was last sent as; "" for none.
func (st *enfState) intentID() string {
	switch {
	case st.intent.rule == (unique.Handle[string]{}):
		return ""
	case st.intent.cluster == (unique.Handle[string]{}):
		return st.intent.rule.Value()
	}
	return st.intent.rule.Value() + st.intent.cluster.Value() + events.EscapeToken(st.Name) + ":" + events.EscapeToken(st.SpecHash)
}

// isIntent reports whether id is the state's intent id, without making the id.
func (st *enfState) isIntent(id string) bool {
	switch {
	case st.intent.rule == (unique.Handle[string]{}):
		return id == ""
	case st.intent.cluster == (unique.Handle[string]{}):
		return id == st.intent.rule.Value()
	}
	rule, cluster, tail, ok := splitIntentID(id)
	return ok && rule == st.intent.rule.Value() && cluster == st.intent.cluster.Value() &&
		tail == events.EscapeToken(st.Name)+":"+events.EscapeToken(st.SpecHash)
}

// succeededPrefix begins the id of an install succeeded event (events.InstallSucceeded.ID) of
// an intent that was not restored.
const succeededPrefix = "install-succeeded:"

// recordOutcome sets the id of the last outcome applied: as a flag when it is the current
// intent's install succeeded, else as it came.
func (st *enfState) recordOutcome(id string) {
	st.outcomeSucceeded = strings.HasPrefix(id, succeededPrefix) && st.intent != intentID{} &&
		st.isIntent(id[len(succeededPrefix):])
	st.lastOutcome = id
	if st.outcomeSucceeded {
		st.lastOutcome = ""
	}
}

// lastOutcomeID is the id of the last outcome applied; "" for none.
func (st *enfState) lastOutcomeID() string { return st.lastOutcomeOf(st.intentID()) }

// lastOutcomeOf is lastOutcomeID given the state's intent id, already made.
func (st *enfState) lastOutcomeOf(intentID string) string {
	if st.outcomeSucceeded {
		return succeededPrefix + intentID
	}
	return st.lastOutcome
}

// isLastOutcome reports whether id is that of the last outcome applied (a redelivery).
func (st *enfState) isLastOutcome(id string) bool {
	if st.outcomeSucceeded {
		return strings.HasPrefix(id, succeededPrefix) && st.isIntent(id[len(succeededPrefix):])
	}
	return id == st.lastOutcome
}

// enfStates are a pair's enforcements, sorted by name. A pair has one or a few, and there is a
// pair per rule and cluster (100,000 at 10,000 clusters × 10 rules): a sorted slice costs a
// pointer an enforcement where a map costs a 200-byte group even for one. Stored as a JSON
// object by name, as the map it replaced was, so records written before read the same.
type enfStates []*enfState

// get returns the named enforcement's state, or nil.
func (s enfStates) get(name string) *enfState {
	if i, found := s.find(name); found {
		return s[i]
	}
	return nil
}

func (s enfStates) find(name string) (int, bool) {
	return slices.BinarySearchFunc(s, name, func(st *enfState, name string) int { return strings.Compare(st.Name, name) })
}

// put adds st, or replaces the state of the same name.
func (s *enfStates) put(st *enfState) {
	if i, found := s.find(st.Name); found {
		(*s)[i] = st
	} else {
		*s = slices.Insert(*s, i, st)
	}
}

// remove drops the named enforcement, if present.
func (s *enfStates) remove(name string) {
	if i, found := s.find(name); found {
		*s = slices.Delete(*s, i, i+1)
	}
}

// names returns the enforcements' names, in order.
func (s enfStates) names() []string {
	out := make([]string, len(s))
	for i, st := range s {
		out[i] = st.Name
	}
	return out
}

// records are the states' stored form, by name; nil for none.
func (s enfStates) records(cluster string) map[string]*enfStateRecord {
	if s == nil {
		return nil
	}
	m := make(map[string]*enfStateRecord, len(s))
	for _, st := range s {
		m[st.Name] = st.record(cluster)
	}
	return m
}

// statesOf is the states stored records hold, by name; nil for none.
func statesOf(m map[string]*enfStateRecord, cluster string) (enfStates, error) {
	if m == nil {
		return nil, nil
	}
	out := make(enfStates, 0, len(m))
	for _, name := range slices.Sorted(maps.Keys(m)) {
		r := m[name]
		if r == nil {
			return nil, fmt.Errorf("enforcement %q has no state", name)
		}
		out = append(out, r.state(name, cluster))
	}
	return out, nil
}

// cloneState is a deep copy of the enforcement's state.
func (st *enfState) cloneState() *enfState {
	e := *st // its trouble is never changed in place: shared
	return &e
}

// store persists the engine's memory. kvStore is the real one; memStore serves unit tests and
// benchmarks of the matching and rendering core.
type store interface {
	putCluster(ctx context.Context, cid string, rec *clusterRecord) error
	deleteCluster(ctx context.Context, cid string) error
	putPair(ctx context.Context, rule, cid string, p *pairState) error
	deletePair(ctx context.Context, rule, cid string) error
	// load returns every stored cluster and pair (pairs keyed by rule, then cid).
	load(ctx context.Context) (map[string]*clusterRecord, map[string]map[string]*pairState, error)
	// putDegraded stores a source's degradation; nil deletes it (the source recovered).
	putDegraded(ctx context.Context, sourceID string, d *degradation) error
	// loadDegraded returns every stored degradation, by source id.
	loadDegraded(ctx context.Context) (map[string]*degradation, error)
	// putHeld stores the selection removals a rule edit held; nil deletes them.
	putHeld(ctx context.Context, rule string, h *heldRemovals) error
	// loadHeld returns every stored hold, by rule.
	loadHeld(ctx context.Context) (map[string]*heldRemovals, error)
	// putRollout stores a rule's staged rollout (rollout.go); nil deletes it.
	putRollout(ctx context.Context, rule string, r *rolloutRecord) error
	// loadRollouts returns every stored rollout, by rule.
	loadRollouts(ctx context.Context) (map[string]*rolloutRecord, error)
	// putListed stores a source's last complete listing (SourceListed).
	putListed(ctx context.Context, sourceID string, l *listing) error
	// loadListed returns every stored listing, by source id.
	loadListed(ctx context.Context) (map[string]*listing, error)
	getRender(ctx context.Context, key string) ([]events.Enforcement, bool, error)
	// putRender caches a render unless one is cached under key already, and returns the cached
	// one: two inputs rendering the same key at once (renders run outside the engine's mutex)
	// both use the first, so a non-deterministic template (uuid) gives one value per key.
	putRender(ctx context.Context, key string, enfs []events.Enforcement) ([]events.Enforcement, error)
	// getFailure returns the error a render stopped with, remembered under key
	// (<uid>.<generation>.failed-<cluster hash>, in the render cache bucket so that
	// purgeRenders drops it with the generation); putFailure remembers one.
	getFailure(ctx context.Context, key string) (string, bool, error)
	putFailure(ctx context.Context, key, message string) error
	// purgeRenders deletes the cached renders and remembered failures of rule uid for
	// generations below generation (all of them when generation is 0).
	purgeRenders(ctx context.Context, uid string, generation int64) error
}

// renderKeyGeneration reads the generation out of a render cache key "<uid>.<generation>.<hash>".
func renderKeyGeneration(key string) (int64, bool) {
	parts := strings.Split(key, ".")
	if len(parts) != 3 {
		return 0, false
	}
	g, err := strconv.ParseInt(parts[1], 10, 64)
	return g, err == nil
}

func stale(key string, generation int64) bool {
	g, ok := renderKeyGeneration(key)
	return ok && (generation == 0 || g < generation)
}

// clusterID is a cluster's identity across sources, safe as a KV key token.
func clusterID(sourceID, key string) string {
	return sourceID + "." + base64.RawURLEncoding.EncodeToString([]byte(key))
}

func ruleToken(rule string) string { return base64.RawURLEncoding.EncodeToString([]byte(rule)) }

// kvStore keeps the state in JetStream KV buckets.
type kvStore struct {
	state  jetstream.KeyValue
	render jetstream.KeyValue
}

// openKVStore binds the state and the render cache buckets, which the shared topology declares
// (events.DefaultTopology, applied before).
func openKVStore(ctx context.Context, js jetstream.JetStream) (*kvStore, error) {
	state, err := js.KeyValue(ctx, events.BucketRuleEngineState)
	if err != nil {
		return nil, fmt.Errorf("bind bucket %s: %w", events.BucketRuleEngineState, err)
	}
	render, err := js.KeyValue(ctx, events.BucketRenderCache)
	if err != nil {
		return nil, fmt.Errorf("bind bucket %s: %w", events.BucketRenderCache, err)
	}
	return &kvStore{state: state, render: render}, nil
}

func (s *kvStore) putJSON(ctx context.Context, kv jetstream.KeyValue, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, key, b); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// del purges a key (no history is kept: History is 1 and the value is gone for good).
func (s *kvStore) del(ctx context.Context, key string) error {
	if err := s.state.Purge(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

func (s *kvStore) putCluster(ctx context.Context, cid string, rec *clusterRecord) error {
	return s.putJSON(ctx, s.state, "cluster."+cid, rec)
}
func (s *kvStore) deleteCluster(ctx context.Context, cid string) error {
	return s.del(ctx, "cluster."+cid)
}
func (s *kvStore) putPair(ctx context.Context, rule, cid string, p *pairState) error {
	return s.putJSON(ctx, s.state, "pair."+ruleToken(rule)+"."+cid, p.record())
}
func (s *kvStore) deletePair(ctx context.Context, rule, cid string) error {
	return s.del(ctx, "pair."+ruleToken(rule)+"."+cid)
}

// load reads the whole state bucket with one watcher (faster than a Get per key).
func (s *kvStore) load(ctx context.Context) (map[string]*clusterRecord, map[string]map[string]*pairState, error) {
	clusters := map[string]*clusterRecord{}
	pairs := map[string]map[string]*pairState{}
	err := service.EachEntry(ctx, s.state, ">", func(entry jetstream.KeyValueEntry) error {
		key := entry.Key()
		switch {
		case strings.HasPrefix(key, "cluster."):
			var rec clusterRecord
			if err := json.Unmarshal(entry.Value(), &rec); err != nil {
				return fmt.Errorf("decode %s: %w", key, err)
			}
			clusters[strings.TrimPrefix(key, "cluster.")] = &rec
		case strings.HasPrefix(key, "pair."):
			parts := strings.SplitN(strings.TrimPrefix(key, "pair."), ".", 2)
			rule, err := base64.RawURLEncoding.DecodeString(parts[0])
			if err != nil || len(parts) != 2 {
				return fmt.Errorf("malformed key %s", key)
			}
			var p pairState
			if err := json.Unmarshal(entry.Value(), &p); err != nil {
				return fmt.Errorf("decode %s: %w", key, err)
			}
			if pairs[string(rule)] == nil {
				pairs[string(rule)] = map[string]*pairState{}
			}
			pairs[string(rule)][parts[1]] = &p
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return clusters, pairs, nil
}

// degradedRecord is a degradation as stored under "degraded.<source id>".
type degradedRecord struct {
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Held    []string  `json:"held,omitempty"`
	At      time.Time `json:"at"`
}

// degradedKey is the state key of a source's degradation. Source ids are hex
// (events.SourceID); anything else is not a valid key and fails the write.
func degradedKey(sourceID string) string { return "degraded." + sourceID }

func (s *kvStore) putDegraded(ctx context.Context, sourceID string, d *degradation) error {
	if d == nil {
		return s.del(ctx, degradedKey(sourceID))
	}
	return s.putJSON(ctx, s.state, degradedKey(sourceID), degradedRecord{Reason: d.reason, Message: d.message, Held: d.held, At: d.at})
}

// loadDegraded reads the "degraded." keys of the state bucket.
func (s *kvStore) loadDegraded(ctx context.Context) (map[string]*degradation, error) {
	out := map[string]*degradation{}
	err := service.EachEntry(ctx, s.state, degradedKey(">"), func(entry jetstream.KeyValueEntry) error {
		var r degradedRecord
		if err := json.Unmarshal(entry.Value(), &r); err != nil {
			return fmt.Errorf("decode %s: %w", entry.Key(), err)
		}
		out[strings.TrimPrefix(entry.Key(), "degraded.")] = &degradation{reason: r.Reason, message: r.Message, held: r.Held, at: r.At}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// heldKey is the state key of a rule's held removals.
func heldKey(rule string) string { return "held." + ruleToken(rule) }

func (s *kvStore) putHeld(ctx context.Context, rule string, h *heldRemovals) error {
	if h == nil {
		return s.del(ctx, heldKey(rule))
	}
	return s.putJSON(ctx, s.state, heldKey(rule), h)
}

// loadHeld reads the "held." keys of the state bucket.
func (s *kvStore) loadHeld(ctx context.Context) (map[string]*heldRemovals, error) {
	out := map[string]*heldRemovals{}
	err := service.EachEntry(ctx, s.state, "held.>", func(entry jetstream.KeyValueEntry) error {
		rule, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(entry.Key(), "held."))
		if err != nil {
			return fmt.Errorf("malformed key %s", entry.Key())
		}
		var h heldRemovals
		if err := json.Unmarshal(entry.Value(), &h); err != nil {
			return fmt.Errorf("decode %s: %w", entry.Key(), err)
		}
		out[string(rule)] = &h
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (s *kvStore) putRollout(ctx context.Context, rule string, r *rolloutRecord) error {
	if r == nil {
		return s.del(ctx, rolloutKey(rule))
	}
	return s.putJSON(ctx, s.state, rolloutKey(rule), r)
}

// loadRollouts reads the "rollout." keys of the state bucket.
func (s *kvStore) loadRollouts(ctx context.Context) (map[string]*rolloutRecord, error) {
	out := map[string]*rolloutRecord{}
	err := service.EachEntry(ctx, s.state, "rollout.>", func(entry jetstream.KeyValueEntry) error {
		rule, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(entry.Key(), "rollout."))
		if err != nil {
			return fmt.Errorf("malformed key %s", entry.Key())
		}
		var r rolloutRecord
		if err := json.Unmarshal(entry.Value(), &r); err != nil {
			return fmt.Errorf("decode %s: %w", entry.Key(), err)
		}
		out[string(rule)] = &r
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// listedKey is the state key of a source's complete listing (source ids are hex).
func listedKey(sourceID string) string { return "listed." + sourceID }

func (s *kvStore) putListed(ctx context.Context, sourceID string, l *listing) error {
	return s.putJSON(ctx, s.state, listedKey(sourceID), l)
}

// loadListed reads the "listed." keys of the state bucket.
func (s *kvStore) loadListed(ctx context.Context) (map[string]*listing, error) {
	out := map[string]*listing{}
	err := service.EachEntry(ctx, s.state, listedKey(">"), func(entry jetstream.KeyValueEntry) error {
		var l listing
		if err := json.Unmarshal(entry.Value(), &l); err != nil {
			return fmt.Errorf("decode %s: %w", entry.Key(), err)
		}
		out[strings.TrimPrefix(entry.Key(), "listed.")] = &l
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (s *kvStore) getRender(ctx context.Context, key string) ([]events.Enforcement, bool, error) {
	entry, err := s.render.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("get render %s: %w", key, err)
	}
	// Entries are JSON of []events.Enforcement; the key carries the rule uid, generation and
	// variables hash, so an entry never needs invalidating: a new generation reads new keys.
	var enfs []events.Enforcement
	if err := json.Unmarshal(entry.Value(), &enfs); err != nil {
		//nolint:nilerr // a damaged entry is a cache miss: it is re-rendered and overwritten
		return nil, false, nil
	}
	return enfs, true, nil
}

func (s *kvStore) putRender(ctx context.Context, key string, enfs []events.Enforcement) ([]events.Enforcement, error) {
	b, err := json.Marshal(enfs)
	if err != nil {
		return enfs, err
	}
	_, err = s.render.Create(ctx, key, b)
	if errors.Is(err, jetstream.ErrKeyExists) {
		if first, ok, gerr := s.getRender(ctx, key); gerr == nil && ok {
			return first, nil
		}
		_, err = s.render.Put(ctx, key, b) // a damaged entry: replace it
	}
	if err != nil {
		return enfs, fmt.Errorf("put render %s: %w", key, err)
	}
	return enfs, nil
}

// failureRecord is a remembered render failure as stored.
type failureRecord struct {
	Error string `json:"error"`
}

func (s *kvStore) getFailure(ctx context.Context, key string) (string, bool, error) {
	entry, err := s.render.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("get %s: %w", key, err)
	}
	var f failureRecord
	if err := json.Unmarshal(entry.Value(), &f); err != nil || f.Error == "" {
		//nolint:nilerr // a damaged entry remembers nothing: the template is rendered again
		return "", false, nil
	}
	return f.Error, true, nil
}

func (s *kvStore) putFailure(ctx context.Context, key, message string) error {
	return s.putJSON(ctx, s.render, key, failureRecord{Error: message})
}

func (s *kvStore) purgeRenders(ctx context.Context, uid string, generation int64) error {
	lister, err := s.render.ListKeysFiltered(ctx, uid+".>")
	if err != nil {
		return fmt.Errorf("list renders of %s: %w", uid, err)
	}
	var errs []error
	for key := range lister.Keys() {
		if stale(key, generation) {
			if err := s.render.Purge(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// memStore is an in-memory store for unit tests and benchmarks.
type memStore struct {
	mu       sync.Mutex
	clusters map[string]*clusterRecord
	pairs    map[string]map[string]*pairState
	renders  map[string][]events.Enforcement
	failures map[string]string
	degraded map[string]*degradation
	held     map[string]*heldRemovals
	listed   map[string]*listing
	rollouts map[string]*rolloutRecord
}

func newMemStore() *memStore {
	return &memStore{clusters: map[string]*clusterRecord{}, pairs: map[string]map[string]*pairState{}, renders: map[string][]events.Enforcement{},
		failures: map[string]string{}, degraded: map[string]*degradation{}, held: map[string]*heldRemovals{}, listed: map[string]*listing{},
		rollouts: map[string]*rolloutRecord{}}
}

func (s *memStore) putListed(_ context.Context, sourceID string, l *listing) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cp := *l
	s.listed[sourceID] = &cp
	return nil
}
func (s *memStore) loadListed(context.Context) (map[string]*listing, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*listing, len(s.listed))
	for k, v := range s.listed {
		cp := *v
		out[k] = &cp
	}
	return out, nil
}

func (s *memStore) putRollout(_ context.Context, rule string, r *rolloutRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r == nil {
		delete(s.rollouts, rule)
		return nil
	}
	cp := *r
	s.rollouts[rule] = &cp
	return nil
}

func (s *memStore) loadRollouts(context.Context) (map[string]*rolloutRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*rolloutRecord, len(s.rollouts))
	for k, v := range s.rollouts {
		cp := *v
		out[k] = &cp
	}
	return out, nil
}

func (s *memStore) putHeld(_ context.Context, rule string, h *heldRemovals) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h == nil {
		delete(s.held, rule)
	} else {
		s.held[rule] = h
	}
	return nil
}
func (s *memStore) loadHeld(context.Context) (map[string]*heldRemovals, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*heldRemovals, len(s.held))
	for k, v := range s.held {
		h := *v
		h.Clusters = maps.Clone(v.Clusters)
		out[k] = &h
	}
	return out, nil
}

func (s *memStore) putDegraded(_ context.Context, sourceID string, d *degradation) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d == nil {
		delete(s.degraded, sourceID)
	} else {
		s.degraded[sourceID] = d
	}
	return nil
}
func (s *memStore) loadDegraded(context.Context) (map[string]*degradation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*degradation, len(s.degraded))
	for k, v := range s.degraded {
		d := *v
		out[k] = &d
	}
	return out, nil
}

func (s *memStore) putCluster(_ context.Context, cid string, rec *clusterRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cp := *rec // the engine compacts its own (setCluster)
	s.clusters[cid] = &cp
	return nil
}
func (s *memStore) deleteCluster(_ context.Context, cid string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.clusters, cid)
	return nil
}
func (s *memStore) putPair(_ context.Context, rule, cid string, p *pairState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pairs[rule] == nil {
		s.pairs[rule] = map[string]*pairState{}
	}
	s.pairs[rule][cid] = p.clone()
	return nil
}
func (s *memStore) deletePair(_ context.Context, rule, cid string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pairs[rule], cid)
	return nil
}
func (s *memStore) load(context.Context) (map[string]*clusterRecord, map[string]map[string]*pairState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	clusters := make(map[string]*clusterRecord, len(s.clusters))
	for k, v := range s.clusters {
		c := *v
		clusters[k] = &c
	}
	pairs := make(map[string]map[string]*pairState, len(s.pairs))
	for r, m := range s.pairs {
		pairs[r] = make(map[string]*pairState, len(m))
		for c, p := range m {
			pairs[r][c] = p.clone()
		}
	}
	return clusters, pairs, nil
}
func (s *memStore) getRender(_ context.Context, key string) ([]events.Enforcement, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.renders[key]
	return e, ok, nil
}
func (s *memStore) putRender(_ context.Context, key string, enfs []events.Enforcement) ([]events.Enforcement, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if first, ok := s.renders[key]; ok {
		return first, nil
	}
	s.renders[key] = enfs
	return enfs, nil
}
func (s *memStore) getFailure(_ context.Context, key string) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	msg, ok := s.failures[key]
	return msg, ok, nil
}
func (s *memStore) putFailure(_ context.Context, key, message string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures[key] = message
	return nil
}
func (s *memStore) purgeRenders(_ context.Context, uid string, generation int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key := range s.renders {
		if strings.HasPrefix(key, uid+".") && stale(key, generation) {
			delete(s.renders, key)
		}
	}
	for key := range s.failures {
		if strings.HasPrefix(key, uid+".") && stale(key, generation) {
			delete(s.failures, key)
		}
	}
	return nil
}
