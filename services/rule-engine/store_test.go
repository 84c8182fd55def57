package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unique"
	"unsafe"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestKVStore round-trips the state and the render cache through real JetStream KV buckets.
func TestKVStore(t *testing.T) {
	st := testKVStore(t, testenv.StartNATS(t).JetStream(t))
	ctx := context.Background()
	cid := clusterID("src", "arn:aws:eks:us-east-1:1:cluster/a b")
	rec := &clusterRecord{Cluster: testCluster("a", nil, true), Revision: 4}
	if err := st.putCluster(ctx, cid, rec); err != nil {
		t.Fatal(err)
	}
	p := &pairState{Rule: share(events.RuleRef{Namespace: "ns", Name: "r"}), RenderKey: "k", Enforcements: enfStates{{Name: "g", SpecHash: "h", Installed: true}}}
	if err := st.putPair(ctx, "ns/r", cid, p); err != nil {
		t.Fatal(err)
	}
	if err := st.putPair(ctx, "ns/gone", cid, p); err != nil {
		t.Fatal(err)
	}
	if err := st.deletePair(ctx, "ns/gone", cid); err != nil {
		t.Fatal(err)
	}
	clusters, pairs, err := st.load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(clusters) != 1 || clusters[cid].Revision != 4 || len(pairs) != 1 || !pairs["ns/r"][cid].Enforcements.get("g").Installed {
		t.Errorf("load: clusters %v, pairs %v", clusters, pairs)
	}

	for _, key := range []string{"u1.1.aaaa", "u1.2.aaaa", "u2.1.aaaa"} {
		if _, err := st.putRender(ctx, key, []events.Enforcement{{Name: key}}); err != nil {
			t.Fatal(err)
		}
	}
	// The first render of a key wins: a second one (another input rendering at the same time)
	// gets the first back.
	if got, err := st.putRender(ctx, "u2.1.aaaa", []events.Enforcement{{Name: "second"}}); err != nil || got[0].Name != "u2.1.aaaa" {
		t.Errorf("second putRender = %v, %v; want the first render", got, err)
	}
	if err := st.putFailure(ctx, "u1.1.failed-00", "loop"); err != nil {
		t.Fatal(err)
	}
	if msg, ok, err := st.getFailure(ctx, "u1.1.failed-00"); err != nil || !ok || msg != "loop" {
		t.Errorf("getFailure = %q, %t, %v", msg, ok, err)
	}
	if err := st.purgeRenders(ctx, "u1", 2); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := st.getFailure(ctx, "u1.1.failed-00"); err != nil || ok {
		t.Errorf("failure of an old generation not purged (%t, %v)", ok, err)
	}
	for key, want := range map[string]bool{"u1.1.aaaa": false, "u1.2.aaaa": true, "u2.1.aaaa": true} {
		got, ok, err := st.getRender(ctx, key)
		if err != nil || ok != want || (ok && got[0].Name != key) {
			t.Errorf("render %s: %v %v %v, want present=%v", key, got, ok, err, want)
		}
	}
}

// testKVStore opens the engine's state through js, with the shared topology applied.
func testKVStore(tb testing.TB, js jetstream.JetStream) *kvStore {
	tb.Helper()
	ctx := context.Background()
	if err := events.DefaultTopology(events.TopologyOptions{}).Apply(ctx, js); err != nil {
		tb.Fatal(err)
	}
	st, err := openKVStore(ctx, js)
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// failingStore fails the first putPair calls, as if the engine died after publishing and before
// its records were written.
type failingStore struct {
	store
	failures int
}

func (s *failingStore) putPair(ctx context.Context, rule, cid string, p *pairState) error {
	if s.failures > 0 {
		s.failures--
		return errors.New("injected: KV unavailable")
	}
	return s.store.putPair(ctx, rule, cid, p)
}

// TestPublishThenPersistFailureIsRepublishedOnce checks the crash-safety order on real NATS: the
// intents are published, the records fail to persist, the event is retried, and the stream
// still holds each intent once (same deterministic ids, deduplicated by the server); a fresh
// engine loading the state then has nothing left to send.
func TestPublishThenPersistFailureIsRepublishedOnce(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	kv, err := openKVStore(ctx, e.js)
	if err != nil {
		t.Fatal(err)
	}
	st := &failingStore{store: kv, failures: 1}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	eng := newEngine(logger, st, e.pub, newRenderer(nil, time.Second), newMetrics(nil), time.Minute)
	cr := &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", UID: "u", Generation: 1},
		Spec: v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements(), Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}}}
	if err := eng.applyRule(ctx, ruleFromSpec(cr, "enforcement")); err != nil {
		t.Fatal(err)
	}
	c := testCluster("a", nil, true)
	if err := eng.applyCluster(ctx, c, 1, 0); err == nil {
		t.Fatal("persist failure not reported")
	}
	if n := len(e.intents()); n != 2 {
		t.Fatalf("%d intents after the failed attempt, want 2 (published before the persist)", n)
	}
	if err := eng.applyCluster(ctx, c, 1, 0); err != nil { // the redelivery
		t.Fatal(err)
	}
	if got := e.intents(); len(got) != 2 {
		t.Fatalf("%d intents after the retry, want the same 2", len(got))
	}

	restarted := newEngine(logger, kv, e.pub, newRenderer(nil, time.Second), newMetrics(nil), time.Minute)
	if err := restarted.load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := restarted.applyRule(ctx, ruleFromSpec(cr, "enforcement")); err != nil {
		t.Fatal(err)
	}
	if err := restarted.applyCluster(ctx, c, 1, 0); err != nil {
		t.Fatal(err)
	}
	if n := len(e.intents()); n != 2 {
		t.Errorf("%d intents after a restart, want still 2", n)
	}
}

// TestPairRecordFormat reads a pair record as releases that kept a pair's enforcements in a map
// wrote it, and writes back the same JSON: the compact list is the engine's memory only.
func TestPairRecordFormat(t *testing.T) {
	stored := `{"rule":{"namespace":"ns","name":"r","generation":2},"cluster":{"name":"a","key":"c-a","url":"https://a","source":{"kind":"rancher","id":"src"},"revision":3},` +
		`"renderKey":"k","enforcements":{"zeta":{"specHash":"h2","intentId":"install:ns:r:2:a:3:zeta:h2","installed":true,"lastOutcome":"install-succeeded:install:ns:r:2:a:3:zeta:h2"},` +
		`"alpha":{"specHash":"h1","intentId":"install:ns:r:2:a:3:alpha:h1","failure":{"reason":"Denied","message":"no","count":2}}}}`
	var p pairState
	if err := json.Unmarshal([]byte(stored), &p); err != nil {
		t.Fatal(err)
	}
	if got := p.Enforcements.names(); !slices.Equal(got, []string{"alpha", "zeta"}) {
		t.Fatalf("names %v, want [alpha zeta]", got)
	}
	if a := p.Enforcements.get("alpha"); a == nil || a.lastFailure() == nil || a.lastFailure().Count != 2 || p.Enforcements.get("zeta") == nil || !p.Enforcements.get("zeta").Installed {
		t.Fatalf("states %+v", p.Enforcements)
	}
	// The intent id is kept in its shared parts, and the last outcome, the intent's install
	// succeeded, as a flag: neither is a string of the state's own.
	z := p.Enforcements.get("zeta")
	if z.intent.cluster == (unique.Handle[string]{}) || z.intent.rule.Value() != "install:ns:r:2:" || z.intent.cluster.Value() != "a:3:" ||
		z.intentID() != "install:ns:r:2:a:3:zeta:h2" || !z.isIntent("install:ns:r:2:a:3:zeta:h2") || z.isIntent("install:ns:r:2:a:3:zeta:h1") {
		t.Errorf("zeta's intent %+v, read as %q", z.intent, z.intentID())
	}
	if !z.outcomeSucceeded || z.lastOutcome != "" || z.lastOutcomeID() != "install-succeeded:install:ns:r:2:a:3:zeta:h2" ||
		!z.isLastOutcome("install-succeeded:install:ns:r:2:a:3:zeta:h2") || z.isLastOutcome("install-succeeded:install:ns:r:1:a:3:zeta:h2") {
		t.Errorf("zeta's last outcome: flag %v, string %q, read as %q", z.outcomeSucceeded, z.lastOutcome, z.lastOutcomeID())
	}
	a := p.Enforcements.get("alpha")
	if a.intent.rule != z.intent.rule || a.intent.cluster != z.intent.cluster {
		t.Error("two intents of one rule generation and cluster revision do not share their parts")
	}
	// Another outcome is kept as it came, and leaves the intent alone.
	a.recordOutcome("install-failed:install:ns:r:2:a:3:alpha:h1:Denied")
	if a.intentID() != "install:ns:r:2:a:3:alpha:h1" || a.SpecHash != "h1" || a.outcomeSucceeded || a.lastOutcomeID() != "install-failed:install:ns:r:2:a:3:alpha:h1:Denied" {
		t.Errorf("after recording its failure: intent %q, hash %q, last outcome %q", a.intentID(), a.SpecHash, a.lastOutcomeID())
	}
	a.recordOutcome("install-succeeded:install:ns:r:1:a:3:alpha:h0")
	if a.intentID() != "install:ns:r:2:a:3:alpha:h1" || a.outcomeSucceeded || a.lastOutcomeID() != "install-succeeded:install:ns:r:1:a:3:alpha:h0" {
		t.Errorf("an outcome of another intent: intent %q, last outcome %q", a.intentID(), a.lastOutcomeID())
	}
	// An id of another form, or of another name or hash, is kept whole.
	for _, id := range []string{"install:ns:r:2:a:3:beta:h1", "install:ns:r:2:a:3:alpha:h9", "custom-id", "install:ns:r"} {
		odd := &enfState{Name: "alpha", SpecHash: "h1"}
		odd.setIntent(id)
		if odd.intent.cluster != (unique.Handle[string]{}) || odd.intentID() != id || !odd.isIntent(id) || odd.isIntent("install:ns:r:2:a:3:alpha:h1") {
			t.Errorf("id %q kept as %+v, read as %q", id, odd.intent, odd.intentID())
		}
	}
	// Names and hashes that need escaping.
	esc := &enfState{Name: "a.b:c", SpecHash: "h/1"}
	escID := (&events.InstallIntent{Rule: events.RuleRef{Namespace: "n.s", Name: "r:1", Generation: 4}, Cluster: events.Target{Name: "x y", Revision: 9},
		Enforcement: events.Enforcement{Name: "a.b:c"}, SpecHash: "h/1"}).ID()
	esc.setIntent(escID)
	if esc.intent.cluster == (unique.Handle[string]{}) || esc.intentID() != escID || !esc.isIntent(escID) {
		t.Errorf("escaped id %q kept as %+v, read as %q", escID, esc.intent, esc.intentID())
	}
	a.recordOutcome("")
	written, err := json.Marshal(&p)
	if err != nil {
		t.Fatal(err)
	}
	var got, want map[string]any
	_ = json.Unmarshal([]byte(stored), &want)
	if err := json.Unmarshal(written, &got); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("written back:\n%s\nwant:\n%s (%v)", written, stored, err)
	}

	p.Enforcements.remove("alpha")
	p.Enforcements.put(&enfState{Name: "beta", SpecHash: "h3"})
	p.Enforcements.put(&enfState{Name: "zeta", SpecHash: "h4"})
	if got := p.Enforcements.names(); !slices.Equal(got, []string{"beta", "zeta"}) || p.Enforcements.get("zeta").SpecHash != "h4" || p.Enforcements.get("alpha") != nil {
		t.Errorf("after remove and put: %v", got)
	}

	// A record whose enforcement has no state is refused with the name, not read as a nil state
	// the engine would trip over later.
	bad := `{"rule":{"namespace":"ns","name":"r","generation":2},"enforcements":{"ghost":null}}`
	if err := json.Unmarshal([]byte(bad), &p); err == nil || !strings.Contains(err.Error(), `enforcement "ghost" has no state`) {
		t.Errorf("error %v", err)
	}
}

// TestClusterRecordCompact keeps in the engine's view only the attributes selection and
// registration read decoded, and gives templates, the render key and the stored record every
// attribute as the event decoded them.
func TestClusterRecordCompact(t *testing.T) {
	sent := `{"source":{"kind":"ocm","id":"src"},"key":"k","name":"a","url":"https://a","eligible":true,` +
		`"attributes":{"version":{"gitVersion":"v1.30.4"},"nodeCount":3,"region":"eu-west","clusterClaims":{"env":"prod"},"argocd.caData":"Q0E="}}`
	var c events.Cluster
	if err := json.Unmarshal([]byte(sent), &c); err != nil {
		t.Fatal(err)
	}
	full := &clusterRecord{Cluster: c, Revision: 7}
	wantVars := templateVars(&c)
	wantRecord, _ := json.Marshal(full)

	rec := &clusterRecord{Cluster: c, Revision: 7}
	rec.Cluster.Attributes = maps.Clone(c.Attributes)
	rec.compact()
	if got := slices.Sorted(maps.Keys(rec.Cluster.Attributes)); !slices.Equal(got, []string{"argocd.caData", "clusterClaims"}) {
		t.Errorf("decoded attributes %v, want the claims and the registration hint", got)
	}
	if !hasClaims(&rec.Cluster, ocmClaimsAttribute, map[string]string{"env": "prod"}) {
		t.Error("the claims selector does not see the claims")
	}
	if reg := withRegistration(events.Target{}, &rec.Cluster).Registration; reg["argocd.caData"] != "Q0E=" {
		t.Errorf("registration %v", reg)
	}
	if got := rec.templateVars(); !reflect.DeepEqual(got, wantVars) {
		t.Errorf("template variables %v, want %v", got, wantVars)
	}
	if rec.templateHash != varsHash(wantVars) || (&clusterVars{rec: rec}).varsHash() != varsHash(wantVars) {
		t.Errorf("template hash %q, want %q", rec.templateHash, varsHash(wantVars))
	}
	if got, err := json.Marshal(rec); err != nil || string(got) != string(wantRecord) {
		t.Errorf("stored record\n%s\nwant\n%s (%v)", got, wantRecord, err)
	}
	var back clusterRecord
	if err := json.Unmarshal(wantRecord, &back); err != nil || !reflect.DeepEqual(back.attributes(), c.Attributes) {
		t.Errorf("read back %v, %v", back.attributes(), err)
	}

	// Attributes that JSON cannot hold (only a test builds them) stay decoded.
	odd := &clusterRecord{Cluster: events.Cluster{Name: "b", Attributes: map[string]any{"f": func() {}}}}
	odd.compact()
	if odd.templateAttributes != nil || odd.Cluster.Attributes["f"] == nil {
		t.Errorf("an attribute JSON cannot encode was moved: %+v", odd)
	}
}

// A pair's rule reference and target are shared values in memory, but the stored record keeps
// the form it had when they were plain fields, and records of older releases read back.
func TestPairRecordKeepsItsFormWithSharedValues(t *testing.T) {
	stored := `{"rule":{"namespace":"ns","name":"r","uid":"u1","generation":3},` +
		`"cluster":{"name":"a","key":"k","url":"https://a","source":{"kind":"static","id":"src"},"identity":"static:a","revision":7},` +
		`"renderKey":"rk","enforcements":{"g":{"specHash":"h","intentId":"i"}}}`
	var p, q pairState
	for _, dst := range []*pairState{&p, &q} {
		if err := json.Unmarshal([]byte(stored), dst); err != nil {
			t.Fatal(err)
		}
	}
	wantRule := events.RuleRef{Namespace: "ns", Name: "r", UID: "u1", Generation: 3}
	wantTarget := events.Target{Name: "a", Key: "k", URL: "https://a", Source: events.SourceRef{Kind: "static", ID: "src"}, Identity: "static:a", Revision: 7}
	if got := p.Rule.Value(); got != wantRule {
		t.Errorf("rule = %+v, want %+v", got, wantRule)
	}
	if got := p.Cluster.Value(); !reflect.DeepEqual(got, wantTarget) {
		t.Errorf("cluster = %+v, want %+v", got, wantTarget)
	}
	if p.Rule != q.Rule || p.Cluster != q.Cluster {
		t.Error("two records of the same rule and target do not share them")
	}
	got, want, b := writtenAgain(t, &p, stored)
	if !reflect.DeepEqual(got["rule"], want["rule"]) || !reflect.DeepEqual(got["cluster"], want["cluster"]) {
		t.Errorf("stored again as\n%s\nwant the rule and cluster of\n%s", b, stored)
	}
	// The target of an intent that replaced an identity keeps Replaces; only Registration,
	// which intents take from the cluster's record, is not kept.
	handover := wantTarget
	handover.Replaces, handover.Registration = "static:old", map[string]string{"argocd.caData": "x"}
	if got := shareTarget(handover).Value(); got.Replaces != "static:old" || got.Registration != nil {
		t.Errorf("shared target = %+v; want Replaces kept, no Registration", got)
	}
	var zero pairState
	if zero.Rule.Value() != (events.RuleRef{}) || zero.Cluster.Value().Name != "" {
		t.Error("a zero pair's rule and target are not the zero values")
	}
}

// An enforcement's failure and trigger messages are kept apart from its state, only while there
// are any; the stored record keeps the form it had when they were fields of the state, and what
// a fold clears leaves no trouble behind.
func TestEnforcementTroubleKeepsItsStoredForm(t *testing.T) {
	stored := storedPair(`{"g":{"specHash":"h","intentId":"i","failure":{"reason":"APIError","message":"boom","count":2},` +
		`"triggerBlocked":"beforeInstall trigger: HTTP 500","afterInstallFailed":"afterInstall trigger: HTTP 502"},` +
		`"ok":{"specHash":"h2","intentId":"i2","installed":true}}`)
	var p pairState
	if err := json.Unmarshal([]byte(stored), &p); err != nil {
		t.Fatal(err)
	}
	g, ok := p.Enforcements.get("g"), p.Enforcements.get("ok")
	if f := g.lastFailure(); f == nil || *f != (failure{Reason: "APIError", Message: "boom", Count: 2}) ||
		g.triggerBlocked() != "beforeInstall trigger: HTTP 500" || g.afterInstallFailed() != "afterInstall trigger: HTTP 502" {
		t.Errorf("read back failure %+v, blocked %q, after-install %q", f, g.triggerBlocked(), g.afterInstallFailed())
	}
	if ok.trouble != nil || ok.lastFailure() != nil {
		t.Errorf("an enforcement without trouble keeps %+v", ok.trouble)
	}
	if got, want, b := writtenAgain(t, &p, stored); !reflect.DeepEqual(got, want) {
		t.Errorf("stored again as\n%s\nwant\n%s", b, stored)
	}

	copied := g.cloneState()
	if !g.foldInstallSucceeded(&events.InstallSucceeded{IntentID: "i", SpecHash: "h"}) {
		t.Fatal("the install of the current intent was not applied")
	}
	if g.lastFailure() != nil || g.triggerBlocked() != "" || g.afterInstallFailed() == "" {
		t.Errorf("after the install: failure %+v, blocked %q, after-install %q; want only the after-install failure",
			g.lastFailure(), g.triggerBlocked(), g.afterInstallFailed())
	}
	if copied.lastFailure() == nil || copied.triggerBlocked() == "" {
		t.Error("a fold on the state changed a copy of it")
	}
	g.foldTriggerDelivered(&events.TriggerDelivered{IntentID: "i", Phase: events.PhaseAfterInstall})
	if g.trouble != nil {
		t.Errorf("with nothing wrong left the state keeps %+v", g.trouble)
	}
}

// storedPair is the stored record of a pair of rule n/r and cluster "c" with the enforcements'
// records given as JSON.
func storedPair(enforcements string) string {
	return `{"rule":{"namespace":"n","name":"r","uid":"u","generation":1},` +
		`"cluster":{"name":"c","key":"c-1","url":"https://c.example","source":{"kind":"rancher","id":"r1"},"revision":1},` +
		`"renderKey":"1","enforcements":` + enforcements + `}`
}

// writtenAgain encodes v, which was read from the stored JSON, and returns both as JSON objects
// to compare, with v's encoding.
func writtenAgain(t *testing.T, v any, stored string) (got, want map[string]any, b []byte) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(stored), &want); err != nil {
		t.Fatal(err)
	}
	return got, want, b
}

// An Application's health keeps its stored form, while in memory the reports of the same status
// share one copy of it, a spec hash equal to the state's is the state's string, and the
// Application's name is not kept when it is the pair's own (cluster "c", enforcement "a": "c-a").
func TestHealthKeepsItsStoredFormWithASharedStatus(t *testing.T) {
	enforcements := `{"a":{"specHash":"h1","intentId":"i1","installed":true,"health":{"application":"c-a","specHash":"h1","observed":true,` +
		`"health":"Healthy","sync":"Synced","operation":"Succeeded","message":"successfully synced (all tasks run)"}},` +
		`"b":{"specHash":"h2","intentId":"i2","installed":true,"health":{"application":"c-b","specHash":"h2","observed":true,` +
		`"health":"Healthy","sync":"Synced","operation":"Succeeded","message":"successfully synced (all tasks run)"}},` +
		`"c":{"specHash":"h3","intentId":"i3","installed":true,"health":{"application":"c-c-of-an-earlier-version","specHash":"h0",` +
		`"health":"Degraded","sync":"OutOfSync","operation":"Failed","message":"one or more objects failed to apply"}}}`
	stored := storedPair(enforcements)
	var p pairState
	if err := json.Unmarshal([]byte(stored), &p); err != nil {
		t.Fatal(err)
	}
	s := p.Enforcements
	a, b, c := s.get("a"), s.get("b"), s.get("c")
	want := healthStatus{Observed: true, Health: "Healthy", Sync: "Synced", Operation: "Succeeded", Message: "successfully synced (all tasks run)"}
	if a.Health.Status() != want || a.Health.application("c", "a") != "c-a" || !a.healthy() || a.failedHealth() {
		t.Errorf("read back %+v %+v: healthy %v, failed %v", a.Health, a.Health.Status(), a.healthy(), a.failedHealth())
	}
	if a.Health.otherName != nil || b.Health.otherName != nil {
		t.Error("a report on the pair's own Application keeps its name")
	}
	if c.Health.otherName == nil || c.Health.application("c", "c") != "c-c-of-an-earlier-version" {
		t.Errorf("a report on an Application named otherwise reads as on %q", c.Health.application("c", "c"))
	}
	if a.Health.status != b.Health.status {
		t.Error("two reports of the same status do not share it")
	}
	if c.Health.status == a.Health.status || c.healthy() || c.failedHealth() {
		t.Errorf("a report of another spec: status %+v, healthy %v, failed %v (it concerns spec h0, the state is h3)",
			c.Health.Status(), c.healthy(), c.failedHealth())
	}
	if unsafe.StringData(a.Health.SpecHash) != unsafe.StringData(a.SpecHash) {
		t.Error("the report's spec hash is not the state's string")
	}
	if got, want, b := writtenAgain(t, &p, stored); !reflect.DeepEqual(got, want) {
		t.Errorf("stored again as\n%s\nwant\n%s", b, stored)
	}

	// A report made from an event is the same as one read back, and the same report again is
	// equal to it; one on another Application, or of another status, is not.
	ev := &events.ApplicationHealth{Cluster: "c", Enforcement: "b", Application: "c-b", SpecHash: "h2", Observed: true,
		Health: "Healthy", Sync: "Synced", Operation: "Succeeded", Message: "successfully synced (all tasks run)"}
	if h := newAppHealth(ev, "c", b); !h.equal(b.Health) || *h != *b.Health {
		t.Errorf("from the event %+v, read back %+v", h, b.Health)
	}
	renamed := *ev
	renamed.Application = "c-b-of-an-earlier-version"
	if h := newAppHealth(&renamed, "c", b); h.equal(b.Health) || !h.equal(newAppHealth(&renamed, "c", b)) {
		t.Error("reports on two Applications are equal, or two on the same one are not")
	}
	degraded := *ev
	degraded.Health = "Degraded"
	if newAppHealth(&degraded, "c", b).equal(b.Health) {
		t.Error("reports of two statuses are equal")
	}
}

// A pair's stored record is written in one pass from plain values (pairRecord); it must stay
// the form records were written in before, which these were (each field set in turn), and read
// back to the same pair.
func TestPairRecordKeepsItsStoredForm(t *testing.T) {
	stored := []string{
		// an installed enforcement, Argo CD reports it healthy
		`{"rule":{"namespace":"enforcement","name":"pipeline-3","uid":"uid-003","generation":1},"cluster":{"name":"cluster-00042","key":"c-00042","url":"https://rancher.example/k8s/clusters/c-00042","source":{"kind":"rancher","id":"9c2fe8081654e22d","secretNamespace":"enforcement","secretName":"rancher"},"identity":"rancher:https://rancher.example/c-00042","revision":43},"renderKey":"1","deletionPolicy":"Delete","enforcements":{"agent-3":{"specHash":"0123456789abcdef","intentId":"install:enforcement:pipeline-3:1:cluster-00042:43:agent-3:0123456789abcdef","installed":true,"lastOutcome":"install-succeeded:install:enforcement:pipeline-3:1:cluster-00042:43:agent-3:0123456789abcdef","health":{"application":"cluster-00042-agent-3","specHash":"0123456789abcdef","observed":true,"health":"Healthy","sync":"Synced","operation":"Succeeded","message":"successfully synced (all tasks run)"}}}}`,
		// two enforcements, one failing and held by triggers, the pair handed over, under a grant, running an older generation
		`{"rule":{"namespace":"enforcement","name":"pipeline-3","uid":"uid-003","generation":1},"cluster":{"name":"cluster-00042","key":"c-00042","url":"https://rancher.example/k8s/clusters/c-00042","source":{"kind":"rancher","id":"9c2fe8081654e22d","secretNamespace":"enforcement","secretName":"rancher"},"identity":"rancher:https://rancher.example/c-00042","revision":43},"renderKey":"1","enforcements":{"agent-3":{"specHash":"0123456789abcdef","intentId":"install:enforcement:pipeline-3:1:cluster-00042:43:agent-3:0123456789abcdef","installed":true,"failure":{"reason":"ApplyFailed","message":"the API server said \"no\" \u003ctwice\u003e","count":2},"triggerBlocked":"webhook https://hooks.example/x answered 500","afterInstallFailed":"after \u0026 before","lastOutcome":"install-succeeded:install:enforcement:pipeline-3:1:cluster-00042:43:agent-3:0123456789abcdef"},"agent-extra":{"specHash":"fedcba9876543210","intentId":"install:enforcement:pipeline-3:2:cluster-00042:43:agent-extra:fedcba9876543210"}},"handedOverTo":"c-77","grant":"grant-fingerprint","specGeneration":1}`,
		// no enforcements (nil)
		`{"rule":{"namespace":"enforcement","name":"pipeline-3","uid":"uid-003","generation":1},"cluster":{"name":"cluster-00042","key":"c-00042","url":"https://rancher.example/k8s/clusters/c-00042","source":{"kind":"rancher","id":"9c2fe8081654e22d","secretNamespace":"enforcement","secretName":"rancher"},"identity":"rancher:https://rancher.example/c-00042","revision":43},"renderKey":"1","deletionPolicy":"Delete","enforcements":null}`,
		// no enforcements (empty)
		`{"rule":{"namespace":"enforcement","name":"pipeline-3","uid":"uid-003","generation":1},"cluster":{"name":"cluster-00042","key":"c-00042","url":"https://rancher.example/k8s/clusters/c-00042","source":{"kind":"rancher","id":"9c2fe8081654e22d","secretNamespace":"enforcement","secretName":"rancher"},"identity":"rancher:https://rancher.example/c-00042","revision":43},"renderKey":"1","deletionPolicy":"Delete","enforcements":{}}`,
		// a health report of another spec, degraded
		`{"rule":{"namespace":"enforcement","name":"pipeline-3","uid":"uid-003","generation":1},"cluster":{"name":"cluster-00042","key":"c-00042","url":"https://rancher.example/k8s/clusters/c-00042","source":{"kind":"rancher","id":"9c2fe8081654e22d","secretNamespace":"enforcement","secretName":"rancher"},"identity":"rancher:https://rancher.example/c-00042","revision":43},"renderKey":"1","deletionPolicy":"Delete","enforcements":{"agent-3":{"specHash":"0123456789abcdef","intentId":"install:enforcement:pipeline-3:1:cluster-00042:43:agent-3:0123456789abcdef","installed":true,"lastOutcome":"install-succeeded:install:enforcement:pipeline-3:1:cluster-00042:43:agent-3:0123456789abcdef","health":{"application":"cluster-00042-agent-3","specHash":"0000000000000000","health":"Degraded","message":"pod \u2028 crash"}}}}`,
	}
	for i, p := range recordPairs() {
		b, err := json.Marshal(p.record())
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != stored[i] {
			t.Errorf("pair %d written as\n%s\nwant\n%s", i, b, stored[i])
		}
		if whole, err := json.Marshal(p); err != nil || string(whole) != stored[i] {
			t.Errorf("pair %d marshalled whole as\n%s (%v)\nwant\n%s", i, whole, err, stored[i])
		}
		var back pairState
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("pair %d: %v", i, err)
		}
		if again, err := json.Marshal(back.record()); err != nil || string(again) != stored[i] {
			t.Errorf("pair %d read back and written again as\n%s (%v)\nwant\n%s", i, again, err, stored[i])
		}
	}
}

// benchPair is a pair of the pipeline benchmark's fleet once its install succeeded and Argo CD
// reported the Application healthy.
func benchPair() *pairState {
	target := events.Target{Name: "cluster-00042", Key: "c-00042", URL: "https://rancher.example/k8s/clusters/c-00042",
		Source: rancherSource(), Identity: "rancher:https://rancher.example/c-00042", Revision: 43}
	intentID := "install:enforcement:pipeline-3:1:cluster-00042:43:agent-3:0123456789abcdef"
	st := &enfState{Name: "agent-3", SpecHash: "0123456789abcdef", Installed: true}
	st.setIntent(intentID)
	st.recordOutcome("install-succeeded:" + intentID)
	st.Health = newAppHealthOf("cluster-00042-agent-3", target.Name, st, st.SpecHash,
		healthStatus{Observed: true, Health: "Healthy", Sync: "Synced", Operation: "Succeeded", Message: "successfully synced (all tasks run)"})
	return &pairState{Rule: share(events.RuleRef{Namespace: "enforcement", Name: "pipeline-3", UID: "uid-003", Generation: 1}),
		Cluster: shareTarget(target), RenderKey: "1", Enforcements: enfStates{st}, terms: share(pairTerms{deletionPolicy: "Delete"})}
}

// recordPairs are pairs with every field of the stored record set in turn.
func recordPairs() []*pairState {
	plain := benchPair()
	troubled := benchPair()
	st := troubled.Enforcements[0].cloneState()
	st.Health = nil
	st.changeTrouble(func(t *enfTrouble) {
		t.Failure = failure{Reason: "ApplyFailed", Message: "the API server said \"no\" <twice>", Count: 2}
		t.TriggerBlocked, t.AfterInstallFailed = "webhook https://hooks.example/x answered 500", "after & before"
	})
	second := &enfState{Name: "agent-extra", SpecHash: "fedcba9876543210"}
	second.setIntent("install:enforcement:pipeline-3:2:cluster-00042:43:agent-extra:fedcba9876543210")
	troubled.Enforcements = enfStates{st, second}
	troubled.terms = share(pairTerms{handedOverTo: "c-77", grant: "grant-fingerprint", specGeneration: 1})
	empty := benchPair()
	empty.Enforcements = nil
	none := benchPair()
	none.Enforcements = enfStates{}
	unhealthy := benchPair()
	u := unhealthy.Enforcements[0].cloneState()
	u.Health = newAppHealthOf("cluster-00042-agent-3", "cluster-00042", u, "0000000000000000",
		healthStatus{Health: "Degraded", Message: "pod \u2028 crash"})
	unhealthy.Enforcements = enfStates{u}
	return []*pairState{plain, troubled, empty, none, unhealthy}
}
