package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// resourceVersions numbers the Application states the tests report, as the API server would.
var resourceVersions atomic.Int64

// reportHealth publishes what Argo CD's application controller would report for the
// Applications of install intents, as argo-syncer tells it (application.health).
func (e *env) reportHealth(health, sync, operation, message string, intents ...*events.InstallIntent) {
	e.t.Helper()
	for _, in := range intents {
		e.publish(&events.ApplicationHealth{Rule: in.Rule, Cluster: in.Cluster.Name, Identity: in.Cluster.Identity,
			Enforcement: in.Enforcement.Name, Application: in.Cluster.Name + "-" + in.Enforcement.Name, SpecHash: in.SpecHash,
			ResourceVersion: strconv.FormatInt(resourceVersions.Add(1), 10), Observed: true,
			Health: health, Sync: sync, Operation: operation, Message: message})
	}
}

// installsOf are the install intents of a rule generation in the stream, by cluster name (the
// last one of each cluster).
func (e *env) generationInstalls(generation int64) map[string]*events.InstallIntent {
	e.t.Helper()
	out := map[string]*events.InstallIntent{}
	for _, ev := range e.intents() {
		if in, ok := ev.(*events.InstallIntent); ok && in.Rule.Generation == generation {
			out[in.Cluster.Name] = in
		}
	}
	return out
}

// waitInstallsOf waits until the generation's install intents name exactly clusters.
func (e *env) waitGenerationInstalls(generation int64, clusters []string) map[string]*events.InstallIntent {
	e.t.Helper()
	var got map[string]*events.InstallIntent
	want := slices.Sorted(slices.Values(clusters))
	testenv.Eventually(e.t, 20*time.Second, func() error {
		got = e.generationInstalls(generation)
		names := sortedKeys(got)
		if !slices.Equal(names, want) {
			return fmt.Errorf("generation %d installs on %v, want %v", generation, names, want)
		}
		return nil
	})
	return got
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func values(m map[string]*events.InstallIntent) []*events.InstallIntent {
	out := make([]*events.InstallIntent, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, m[k])
	}
	return out
}

// rolloutMoves reads the rule.rollout.progressed events in the stream as "generation step phase".
func (e *env) rolloutMoves() []string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := e.js.OrderedConsumer(ctx, events.StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"enforcement.rule.rollout.progressed.>"}})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for {
		batch, err := cons.FetchNoWait(500)
		if err != nil {
			e.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			ev, _, err := events.Decode(m.Subject(), m.Headers(), m.Data())
			if err != nil {
				e.t.Fatal(err)
			}
			p := ev.(*events.RolloutProgressed)
			out = append(out, strings.Join(strings.Fields(fmt.Sprintf("%d %s %s %s", p.Rule.Generation, p.Step, p.Phase, p.Application)), " "))
		}
		if n == 0 {
			return out
		}
	}
}

// waitMoves waits until the stream's rollout moves are exactly want.
func (e *env) waitMoves(want ...string) {
	e.t.Helper()
	testenv.Eventually(e.t, 20*time.Second, func() error {
		if got := e.rolloutMoves(); !slices.Equal(got, want) {
			return fmt.Errorf("rollout moves:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		return nil
	})
}

// fleetRollout is the staged rule of the tests: a canary step by label, then half of the fleet
// behind an approval, then the rest.
func fleetRollout(value string) v1beta1.ClusterRuleSpec {
	half, all := int32(50), int32(100)
	enf := v1beta1.Enforcement{Name: "agent", Repo: "https://charts.example/agent", Path: "agent",
		Helm: &v1beta1.Helm{Parameters: map[string]apiextensionsJSON{"image.tag": raw(strconv.Quote(value))}}}
	return v1beta1.ClusterRuleSpec{Enforcements: []v1beta1.Enforcement{enf},
		Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{Labels: map[string]string{"env": "prod"}}},
		Rollout: &v1beta1.Rollout{Steps: []v1beta1.RolloutStep{
			{Name: "canary", MatchLabels: map[string]string{"ring": "canary"}},
			{Name: "half", Percentage: &half, RequireApproval: true},
			{Name: "rest", Percentage: &all},
		}}}
}

// TestStagedRolloutOverThirtyClusters walks a rule with three steps over 30 clusters: its first
// generation reaches the canaries, waits for the approval of "half", and, its Applications
// Healthy and Synced step by step, completes. An edit (a new image tag) reaches the canaries
// only; one of them turns Degraded and the rollout halts there, naming it, and touches no later
// cluster, while a cluster that appears meanwhile gets the stable generation. Editing back
// starts a new rollout: the canaries go back first, the step needing approval waits for the
// rule's approval annotation. Every move is on the bus.
func TestStagedRolloutOverThirtyClusters(t *testing.T) {
	e := newEnv(t)
	svc := e.startService()
	// The rule comes first, as when the scanner starts listing a source once a rule names it:
	// until the source has listed completely no step starts, so the canary step cannot pass
	// with none of its clusters known yet.
	e.createRule("agent", fleetRollout("1.0"))
	e.waitReady("agent", v1beta1.ReasonRollingOut, func(st v1beta1.ClusterRuleStatus) error {
		if ro := st.Rollout; ro == nil || ro.Step != "canary" || !strings.Contains(ro.Message, "waits for the rule's rancher source to list its clusters: it has not listed completely yet") {
			return fmt.Errorf("rollout %+v", st.Rollout)
		}
		return nil
	})
	var all, canaries []string
	for i := range 30 {
		labels := map[string]string{"env": "prod"}
		name := fmt.Sprintf("c%02d", i)
		if i%10 == 0 {
			labels["ring"] = "canary"
			canaries = append(canaries, name)
		}
		e.publish(appeared(testCluster(name, labels, true), uint64(i+1)))
		all = append(all, name)
		if i == 28 { // the listing's announcement may come before its last cluster
			e.publish(&events.SourceListed{Source: rancherSource(), Scan: 1, Known: 30})
			e.waitReady("agent", v1beta1.ReasonRollingOut, func(st v1beta1.ClusterRuleStatus) error {
				if ro := st.Rollout; ro == nil || !strings.HasSuffix(ro.Message, "listed 30 cluster(s), 29 seen so far") {
					return fmt.Errorf("rollout %+v", st.Rollout)
				}
				return nil
			})
			if got := e.generationInstalls(1); len(got) != 0 {
				t.Fatalf("before the source's listing was complete, generation 1 reached %v", sortedKeys(got))
			}
		}
	}

	// Generation 1: the canaries first; nothing else until they are Healthy and Synced.
	gen1 := e.waitGenerationInstalls(1, canaries)
	e.waitReady("agent", v1beta1.ReasonRollingOut, func(st v1beta1.ClusterRuleStatus) error {
		if ro := st.Rollout; ro == nil || ro.Step != "canary" || ro.Steps[0].Clusters != 3 || ro.Steps[0].Updated != 3 || ro.Steps[0].Healthy != 0 {
			return fmt.Errorf("rollout %+v", st.Rollout)
		}
		return nil
	})
	e.reportHealth(events.HealthProgressing, events.SyncOutOfSync, "Running", "", values(gen1)...)
	e.reportHealth(events.HealthHealthy, events.SyncSynced, "Succeeded", "", values(gen1)...)
	cr := e.waitReady("agent", v1beta1.ReasonRolloutAwaitingApproval, nil)
	if msg := cr.Status.Conditions[0].Message; !strings.Contains(msg, "enforcement approve "+e.ns+"/agent half") {
		t.Errorf("Ready message %q does not say how to approve", msg)
	}
	if got := e.generationInstalls(1); len(got) != 3 {
		t.Fatalf("before the approval, %d clusters got generation 1, want the 3 canaries", len(got))
	}

	// The approval starts "half": 50% of the fleet, canaries counted, then "rest".
	e.publish(&events.RolloutApproved{Rule: events.RuleRef{Namespace: e.ns, Name: "agent", Generation: 1}, Step: "half", By: "ops@laptop"})
	var half map[string]*events.InstallIntent
	testenv.Eventually(t, 20*time.Second, func() error {
		half = e.generationInstalls(1)
		if len(half) != 15 {
			return fmt.Errorf("%d clusters on generation 1, want 15 (half of 30)", len(half))
		}
		return nil
	})
	e.reportHealth(events.HealthHealthy, events.SyncSynced, "Succeeded", "", values(half)...)
	gen1 = e.waitGenerationInstalls(1, all)
	e.reportHealth(events.HealthHealthy, events.SyncSynced, "Succeeded", "", values(gen1)...)
	e.waitReady("agent", v1beta1.ReasonProgressing, func(st v1beta1.ClusterRuleStatus) error {
		if ro := st.Rollout; ro == nil || ro.Phase != v1beta1.RolloutComplete || len(ro.Generations) != 1 || ro.Generations[0].Count != 30 {
			return fmt.Errorf("rollout %+v", st.Rollout)
		}
		return nil
	})

	// The preview of generation 2 tells which changes the rollout makes now (the canaries) and
	// which later, step by step.
	pr, msg := e.previewOf(manifestOf(t, "NS", "agent", fleetRollout("2.0")))
	if msg != "" {
		t.Fatal(msg)
	}
	if ro := pr.Rollout; ro == nil || ro.Phase != v1beta1.RolloutProgressing || ro.Step != "canary" || ro.StableGeneration != 1 ||
		len(ro.Steps) != 3 || !slices.Equal(ro.Steps[0].Clusters, canaries) || !ro.Steps[1].RequireApproval {
		t.Fatalf("preview rollout %+v", pr.Rollout)
	}
	var now, later []string
	for _, c := range pr.Changes {
		if c.Action != events.PreviewUpdate {
			t.Errorf("preview change %+v, want updates only", c)
		}
		if c.Staged {
			later = append(later, c.Step)
		} else {
			now = append(now, c.Cluster+" "+c.Step)
		}
	}
	if want := []string{"c00 canary", "c10 canary", "c20 canary"}; !slices.Equal(now, want) || len(later) != 27 ||
		slices.Contains(later, "canary") || !slices.Contains(later, "half") || !slices.Contains(later, "rest") {
		t.Errorf("preview changes now %v (want %v), later %d by step %v", now, want, len(later), later)
	}

	// Generation 2: a new image tag. The canaries get it; one turns Degraded: halted.
	e.updateRule("agent", func(cr *v1beta1.ClusterRule) { cr.Spec = fleetRollout("2.0") })
	gen2 := e.waitGenerationInstalls(2, canaries)
	e.reportHealth(events.HealthHealthy, events.SyncSynced, "Succeeded", "", gen2["c00"], gen2["c10"])
	e.reportHealth(events.HealthDegraded, events.SyncSynced, "Succeeded", "Deployment agent exceeded its progress deadline", gen2["c20"])
	cr = e.waitReady("agent", v1beta1.ReasonRolloutHalted, func(st v1beta1.ClusterRuleStatus) error {
		ro := st.Rollout
		if ro == nil || ro.Phase != v1beta1.RolloutHalted || ro.StableGeneration != 1 || len(ro.Generations) != 2 ||
			ro.Generations[0].Count != 27 || ro.Generations[1].Count != 3 {
			return fmt.Errorf("rollout %+v", st.Rollout)
		}
		return nil
	})
	if msg := cr.Status.Conditions[0].Message; !strings.Contains(msg, "c20-agent on c20 is Degraded: Deployment agent exceeded its progress deadline") {
		t.Errorf("Ready message %q does not name the Degraded Application", msg)
	}
	if page := scrape(t, svc.Metrics); !strings.Contains(page, `enforcement_rule_engine_rollouts{phase="Halted"} 1`) ||
		!strings.Contains(page, `enforcement_rule_engine_rollouts{phase="Complete"} 0`) {
		t.Errorf("the rollouts gauge does not count one halted rollout:\n%s", grepLines(page, "enforcement_rule_engine_rollouts"))
	}
	// The explanation of the rule shows the halted rollout and who runs which generation.
	ex, _, msg := e.explainRuleOf(e.ns, "agent")
	if msg != "" {
		t.Fatal(msg)
	}
	if ro := ex.Rollout; ro == nil || ro.Phase != v1beta1.RolloutHalted || ro.Generation != 2 || ro.StableGeneration != 1 ||
		ro.Steps[0].Updated != 3 || ro.Steps[0].Healthy != 2 || !strings.Contains(ro.Message, "c20-agent on c20") {
		t.Fatalf("explain rollout %+v", ex.Rollout)
	}
	for _, c := range ex.Clusters {
		if want := map[bool]int64{true: 2, false: 1}[slices.Contains(canaries, c.Name)]; c.Generation != want || !c.Matches {
			t.Errorf("explain cluster %+v: want generation %d", c, want)
		}
	}

	// A cluster that appears during the rollout, in no step reached, gets the stable generation
	// (the rule's decision at generation 2, with generation 1's spec).
	e.publish(appeared(testCluster("c30", map[string]string{"env": "prod"}, true), 31))
	var c30 *events.InstallIntent
	testenv.Eventually(t, 20*time.Second, func() error {
		if c30 = e.generationInstalls(2)["c30"]; c30 == nil || c30.Enforcement.HelmParameters[0].Value != "1.0" {
			return fmt.Errorf("c30 install: %+v", c30)
		}
		return nil
	})
	var touched []string
	for name, in := range e.generationInstalls(2) {
		if in.Enforcement.HelmParameters[0].Value == "2.0" {
			touched = append(touched, name)
		}
	}
	if slices.Sort(touched); !slices.Equal(touched, canaries) {
		t.Fatalf("the halted rollout sent image 2.0 to %v, want only the canaries %v", touched, canaries)
	}

	// Editing back (generation 3, the spec of generation 1) is the rollback: a new rollout from
	// the first step, whose stable generation is still 1. The clusters it has not reached run
	// the stable generation: the canaries go back to generation 1's spec at once (intents of
	// generation 3, the rule's decision now), and the rollout itself has nothing left to send.
	// "half" is approved by the rule's annotation.
	e.updateRule("agent", func(cr *v1beta1.ClusterRule) {
		cr.Spec = fleetRollout("1.0")
		cr.Annotations = map[string]string{ApproveAnnotation: "generation/3/step/half"}
	})
	gen3 := e.waitGenerationInstalls(3, canaries)
	for _, in := range gen3 {
		if in.SpecHash != gen1[in.Cluster.Name].SpecHash {
			t.Errorf("%s: rollback spec hash %s, want generation 1's %s", in.Cluster.Name, in.SpecHash, gen1[in.Cluster.Name].SpecHash)
		}
	}
	e.reportHealth(events.HealthHealthy, events.SyncSynced, "Succeeded", "", append(values(gen3), c30)...)
	e.waitReady("agent", v1beta1.ReasonProgressing, func(st v1beta1.ClusterRuleStatus) error {
		if ro := st.Rollout; ro == nil || ro.Phase != v1beta1.RolloutComplete || ro.Generation != 3 ||
			len(ro.Generations) != 1 || ro.Generations[0].Generation != 3 || ro.Generations[0].Count != 31 {
			return fmt.Errorf("rollout %+v", st.Rollout)
		}
		return nil
	})
	if got := sortedKeys(e.generationInstalls(3)); !slices.Equal(got, canaries) {
		t.Errorf("generation 3 sent installs to %v, want only the canaries that ran generation 2", got)
	}
	e.waitMoves(
		"1 canary StepStarted", "1 canary StepCompleted", "1 half AwaitingApproval", "1 half StepStarted",
		"1 half StepCompleted", "1 rest StepStarted", "1 rest StepCompleted", "1 Completed",
		"2 canary StepStarted", "2 canary Halted c20-agent",
		"3 canary StepStarted", "3 canary StepCompleted", "3 half StepStarted", "3 half StepCompleted",
		"3 rest StepStarted", "3 rest StepCompleted", "3 Completed")

	// A deleted rule forgets its rollout: the record leaves the state bucket and the gauge.
	e.deleteRule("agent")
	kv, err := e.js.KeyValue(t.Context(), events.BucketRuleEngineState)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if _, err := kv.Get(t.Context(), rolloutKey(e.ns+"/agent")); !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("the deleted rule's rollout record is still stored (err %w)", err)
		}
		if page := scrape(t, svc.Metrics); !strings.Contains(page, `enforcement_rule_engine_rollouts{phase="Complete"} 0`) {
			return fmt.Errorf("the rollouts gauge still counts the deleted rule's:\n%s", grepLines(page, "enforcement_rule_engine_rollouts"))
		}
		return nil
	})
}

// TestRolloutBakesBeforeTheNextStep: a step with a bake time moves on only after its
// Applications stayed Healthy and Synced for it; an Application that leaves Healthy restarts
// the bake.
func TestRolloutBakesBeforeTheNextStep(t *testing.T) {
	e := newEnv(t)
	e.start()
	for i := range 4 {
		labels := map[string]string{"env": "prod"}
		if i == 0 {
			labels["ring"] = "canary"
		}
		e.publish(appeared(testCluster(fmt.Sprintf("c%d", i), labels, true), uint64(i+1)))
	}
	e.publish(&events.SourceListed{Source: rancherSource(), Scan: 1, Known: 4})
	spec := fleetRollout("1.0")
	spec.Rollout.Steps = []v1beta1.RolloutStep{
		{Name: "canary", MatchLabels: map[string]string{"ring": "canary"}, BakeTime: &metav1.Duration{Duration: 2 * time.Second}},
	}
	e.createRule("agent", spec)
	canary := e.waitGenerationInstalls(1, []string{"c0"})
	e.reportHealth(events.HealthHealthy, events.SyncSynced, "Succeeded", "", canary["c0"])
	e.waitReady("agent", v1beta1.ReasonRollingOut, func(st v1beta1.ClusterRuleStatus) error {
		if ro := st.Rollout; ro == nil || ro.Phase != v1beta1.RolloutBaking || ro.Steps[0].BakeStartedAt == nil {
			return fmt.Errorf("rollout %+v", st.Rollout)
		}
		return nil
	})
	if got := e.generationInstalls(1); len(got) != 1 {
		t.Fatalf("while the canary bakes, %d clusters got the generation", len(got))
	}
	e.waitGenerationInstalls(1, []string{"c0", "c1", "c2", "c3"})
	e.waitMoves("1 canary StepStarted", "1 canary Baking", "1 canary StepCompleted", "1 Completed")
}

// manifestOf is a ClusterRule manifest (JSON, which YAML readers take).
func manifestOf(t *testing.T, ns, name string, spec v1beta1.ClusterRuleSpec) string {
	t.Helper()
	cr := v1beta1.ClusterRule{TypeMeta: metav1.TypeMeta{APIVersion: v1beta1.GroupVersion.String(), Kind: "ClusterRule"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	b, err := json.Marshal(cr)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRolloutSurvivesARestartOneClusterAtATime: with maxUnavailable 1 the clusters of a step
// are updated one at a time, each after the one before reports Healthy and Synced; a restart
// in the middle picks the rollout up where it stood (the record is in the state bucket), and a
// Healthy report that arrives while the engine is down moves it on after the restart.
func TestRolloutSurvivesARestartOneClusterAtATime(t *testing.T) {
	e := newEnv(t)
	stop := e.start()
	for i := range 3 {
		e.publish(appeared(testCluster(fmt.Sprintf("c%d", i), map[string]string{"env": "prod"}, true), uint64(i+1)))
	}
	e.publish(&events.SourceListed{Source: rancherSource(), Scan: 1, Known: 3})
	all, one := int32(100), intstr.FromInt32(1)
	spec := fleetRollout("1.0")
	spec.Rollout = &v1beta1.Rollout{MaxUnavailable: &one, Steps: []v1beta1.RolloutStep{{Name: "fleet", Percentage: &all}}}
	e.createRule("agent", spec)
	var first map[string]*events.InstallIntent
	testenv.Eventually(t, 20*time.Second, func() error {
		if first = e.generationInstalls(1); len(first) != 1 {
			return fmt.Errorf("%d clusters updated, want 1", len(first))
		}
		return nil
	})
	stop()
	e.reportHealth(events.HealthHealthy, events.SyncSynced, "Succeeded", "", values(first)...)
	e.start()
	var two map[string]*events.InstallIntent
	testenv.Eventually(t, 20*time.Second, func() error {
		if two = e.generationInstalls(1); len(two) != 2 {
			return fmt.Errorf("%d clusters updated, want 2", len(two))
		}
		return nil
	})
	e.reportHealth(events.HealthHealthy, events.SyncSynced, "Succeeded", "", values(two)...)
	done := e.waitGenerationInstalls(1, []string{"c0", "c1", "c2"})
	e.reportHealth(events.HealthHealthy, events.SyncSynced, "Succeeded", "", values(done)...)
	e.waitMoves("1 fleet StepStarted", "1 fleet StepCompleted", "1 Completed")
}

// scrape reads the metrics page the service serves on addr.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// grepLines keeps the lines of text that contain substr.
func grepLines(text, substr string) string {
	var out []string
	for line := range strings.Lines(text) {
		if strings.Contains(line, substr) {
			out = append(out, strings.TrimRight(line, "\n"))
		}
	}
	return strings.Join(out, "\n")
}

// TestRolloutStartsOnASourceThatShrankSinceItsListing: a source listed completely stays listed
// when clusters go later (and across a restart), so a rollout on it starts instead of waiting
// for a cluster count the source no longer has.
func TestRolloutStartsOnASourceThatShrankSinceItsListing(t *testing.T) {
	e := newEnv(t)
	stop := e.start()
	installsOf := func(rule string) []string {
		var out []string
		for _, ev := range e.intents() {
			if in, ok := ev.(*events.InstallIntent); ok && in.Rule.Name == rule {
				out = append(out, in.Cluster.Name)
			}
		}
		slices.Sort(out)
		return out
	}
	waitInstalls := func(rule string, want ...string) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, func() error {
			if got := installsOf(rule); !slices.Equal(got, want) {
				return fmt.Errorf("rule %s installs on %v, want %v", rule, got, want)
			}
			return nil
		})
	}
	// A first rollout shows when the listing is complete: its canary step starts.
	e.createRule("first", fleetRollout("1.0"))
	for i := range 3 {
		labels := map[string]string{"env": "prod"}
		if i == 0 {
			labels["ring"] = "canary"
		}
		e.publish(appeared(testCluster(fmt.Sprintf("c%d", i), labels, true), uint64(i+1)))
	}
	e.publish(&events.SourceListed{Source: rancherSource(), Scan: 1, Known: 3})
	waitInstalls("first", "c0")
	e.publish(&events.ClusterGone{Source: rancherSource(), Key: "c-c2", Name: "c2", Revision: 4, LastSeen: time.Now()})
	e.waitReady("first", v1beta1.ReasonRollingOut, func(st v1beta1.ClusterRuleStatus) error {
		if st.MatchedClusters != 2 {
			return fmt.Errorf("matched %d clusters, want 2 (c2 is gone)", st.MatchedClusters)
		}
		return nil
	})
	stop()
	e.start()

	e.createRule("agent", fleetRollout("1.0"))
	waitInstalls("agent", "c0")
}
