package e2e

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// rolloutRule is the ClusterRule "agent" of the staged rollout test: the chart's image.tag is
// the value each generation changes; three steps, the second behind an approval.
const rolloutRule = `apiVersion: enforcement.globo.com/v1beta1
kind: ClusterRule
metadata:
  name: agent
  namespace: enforcement
spec:
  source:
    static: {}
  enforcements:
    - name: agent
      repo: https://github.com/example/agent
      path: chart
      helm:
        parameters:
          image.tag: "%s"
  rollout:
    maxUnavailable: 3
    steps:
      - name: canary
        matchLabels: {ring: canary}
        bakeTime: 1s
      - name: half
        percentage: 50
        requireApproval: true
      - name: rest
        percentage: 100
`

// argoController plays Argo CD's application controller for the Applications in the Argo CD
// namespace, as it writes their status: an Application whose spec it has not compared yet gets
// status.sync.comparedTo = its source and destination, OutOfSync and Progressing with a running
// sync; on its next round the verdict health decides (Healthy and Synced after a succeeded
// sync, or Degraded after a failed one). Applications have no status subresource: the status
// goes in with an update, as the controller's does.
func (s *system) argoController(ctx context.Context, degraded func(app *unstructured.Unstructured) bool) {
	apps := s.dyn.Resource(gvrApplication).Namespace(argoNS)
	for ctx.Err() == nil {
		list, err := apps.List(ctx, metav1.ListOptions{})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for i := range list.Items {
			app := &list.Items[i]
			status := argoStatus(app, degraded(app))
			if status == nil {
				continue
			}
			app.Object["status"] = status
			// A conflict (argo-syncer wrote meanwhile) is tried again on the next round.
			_, _ = apps.Update(ctx, app, metav1.UpdateOptions{})
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// argoStatus is the status Argo CD's controller would write next for the Application, or nil
// when it has nothing new to write.
func argoStatus(app *unstructured.Unstructured, degraded bool) map[string]any {
	source, _, _ := unstructured.NestedMap(app.Object, "spec", "source")
	destination, _, _ := unstructured.NestedMap(app.Object, "spec", "destination")
	comparedSource, _, _ := unstructured.NestedMap(app.Object, "status", "sync", "comparedTo", "source")
	comparedDestination, _, _ := unstructured.NestedMap(app.Object, "status", "sync", "comparedTo", "destination")
	health, _, _ := unstructured.NestedString(app.Object, "status", "health", "status")
	status := func(sync, health, phase, message string) map[string]any {
		return map[string]any{
			"sync":           map[string]any{"status": sync, "comparedTo": map[string]any{"source": source, "destination": destination}},
			"health":         map[string]any{"status": health, "message": message},
			"operationState": map[string]any{"operation": map[string]any{"sync": map[string]any{}}, "phase": phase, "message": message, "startedAt": time.Now().UTC().Format(time.RFC3339)},
		}
	}
	switch {
	case !reflect.DeepEqual(source, comparedSource) || !reflect.DeepEqual(destination, comparedDestination):
		return status(events.SyncOutOfSync, events.HealthProgressing, "Running", "")
	case health != events.HealthProgressing:
		return nil
	case degraded:
		return status(events.SyncSynced, events.HealthDegraded, events.OperationFailed, "Deployment agent: 0 of 1 replicas available (CrashLoopBackOff)")
	default:
		return status(events.SyncSynced, events.HealthHealthy, "Succeeded", "")
	}
}

// imageTag is the image.tag helm parameter of an Application.
func imageTag(app *unstructured.Unstructured) string {
	params, _, _ := unstructured.NestedSlice(app.Object, "spec", "source", "helm", "parameters")
	for _, p := range params {
		if m, ok := p.(map[string]any); ok && m["name"] == "image.tag" {
			v, _ := m["value"].(string)
			return v
		}
	}
	return ""
}

// tags maps each Application of the Argo CD namespace to its image.tag.
func (s *system) tags() map[string]string {
	s.t.Helper()
	list, err := s.dyn.Resource(gvrApplication).Namespace(argoNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[string]string{}
	for _, app := range list.Items {
		out[app.GetName()] = imageTag(&app)
	}
	return out
}

// rollout reads the rule's status.rollout phase and step, and each step's updated count.
func (s *system) rollout(namespace, name string) (phase, step string, updated map[string]int64) {
	s.t.Helper()
	u, err := s.dyn.Resource(gvrClusterRule).Namespace(namespace).Get(context.Background(), name, getOpts)
	if err != nil {
		s.t.Fatal(err)
	}
	phase, _, _ = unstructured.NestedString(u.Object, "status", "rollout", "phase")
	step, _, _ = unstructured.NestedString(u.Object, "status", "rollout", "step")
	steps, _, _ := unstructured.NestedSlice(u.Object, "status", "rollout", "steps")
	updated = map[string]int64{}
	for _, st := range steps {
		m, _ := st.(map[string]any)
		n, _ := m["name"].(string)
		c, _ := m["updated"].(int64)
		updated[n] = c
	}
	return phase, step, updated
}

// editRule merge-patches the rule: the image tag (a new generation) and its annotations.
func (s *system) editRule(namespace, name, tag string, annotations map[string]string) {
	s.t.Helper()
	patch := map[string]any{
		"metadata": map[string]any{"annotations": annotations},
		"spec": map[string]any{"enforcements": []any{map[string]any{
			"name": "agent", "repo": "https://github.com/example/agent", "path": "chart",
			"helm": map[string]any{"parameters": map[string]any{"image.tag": tag}},
		}}},
	}
	_, err := s.dyn.Resource(gvrClusterRule).Namespace(namespace).Patch(context.Background(), name, types.MergePatchType,
		[]byte(marshal(s.t.(*testing.T), patch)), metav1.PatchOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
}

// TestStagedRolloutGatedOnArgoCDHealth runs the built services over 30 static clusters, three of
// them canaries, with the test playing Argo CD's application controller (it writes the
// Applications' status). The first generation rolls out step by step and waits at the approval
// gate until an operator's approval event; the second (approved ahead by annotation) halts
// when its first non-canary Application turns Degraded, naming it, and updates no cluster of
// the last step; the edit back rolls every cluster the halted rollout reached back, and
// completes. argo-syncer's health reports and every move of the rollouts are on the bus.
func TestStagedRolloutGatedOnArgoCDHealth(t *testing.T) {
	s := startSystem(t, nil)
	var clusters strings.Builder
	var canaries, apps []string
	for i := 1; i <= 30; i++ {
		name := fmt.Sprintf("edge-%02d", i)
		ring := "main"
		if i%10 == 0 {
			ring = "canary"
			canaries = append(canaries, name+"-agent")
		}
		apps = append(apps, name+"-agent")
		fmt.Fprintf(&clusters, "- name: %s\n  url: https://%s.example:6443\n  labels: {ring: %s}\n", name, name, ring)
	}
	s.createSecret("static", map[string][]byte{"token": []byte("static-token")})
	s.staticClusters(clusters.String())

	// Argo CD: version "2" breaks every non-canary cluster it reaches.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.argoController(ctx, func(app *unstructured.Unstructured) bool {
		return imageTag(app) == "2" && !slices.Contains(canaries, app.GetName())
	})

	// Generation 1: the canaries, then the approval gate holds the rest.
	s.applyRule(operatorNS, fmt.Sprintf(rolloutRule, "1"))
	testenv.Eventually(t, 90*time.Second, func() error {
		if reason, msg := s.readyCondition(operatorNS, "agent"); reason != "RolloutAwaitingApproval" {
			return fmt.Errorf("Ready reason %q (%s), want RolloutAwaitingApproval", reason, msg)
		}
		// The scanner lists the static source once a rule names it; no step starts before that
		// listing is complete, so the canaries are known when the canary step starts.
		return equal("Applications while the approval gate waits", s.names(gvrApplication), canaries)
	})
	time.Sleep(3 * time.Second)
	if got := s.names(gvrApplication); !slices.Equal(got, canaries) {
		t.Fatalf("the approval gate let clusters through unapproved: %v", got)
	}
	if _, msg := s.readyCondition(operatorNS, "agent"); !strings.Contains(msg, "approve") {
		t.Errorf("awaiting approval, the Ready message does not say how to approve: %s", msg)
	}

	// An operator approves the step, as `enforcement approve enforcement/agent half` does.
	rule, err := s.dyn.Resource(gvrClusterRule).Namespace(operatorNS).Get(context.Background(), "agent", getOpts)
	if err != nil {
		t.Fatal(err)
	}
	approval := &events.RolloutApproved{Step: "half", By: "e2e@test",
		Rule: events.RuleRef{Namespace: operatorNS, Name: "agent", UID: string(rule.GetUID()), Generation: rule.GetGeneration()}}
	if err := events.NewPublisher(s.js, "/enforcement/cli").PublishAll(context.Background(), []events.Event{approval}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 120*time.Second, func() error {
		if phase, step, _ := s.rollout(operatorNS, "agent"); phase != "Complete" {
			return fmt.Errorf("rollout of generation 1 is %s at step %s; %s", phase, step, s.lastHealth())
		}
		return equal("Applications", s.names(gvrApplication), apps)
	})

	// Generation 2, its approval given ahead: the canaries bake, the half step's first
	// Applications turn Degraded and the rollout halts there.
	s.editRule(operatorNS, "agent", "2", map[string]string{"enforcement.globo.com/approve-rollout": "generation/2/step/half"})
	var halted string
	testenv.Eventually(t, 120*time.Second, func() error {
		reason, msg := s.readyCondition(operatorNS, "agent")
		if reason != "RolloutHalted" {
			return fmt.Errorf("Ready reason %q (%s), want RolloutHalted", reason, msg)
		}
		halted = msg
		return nil
	})
	time.Sleep(3 * time.Second) // anything the halt failed to stop would show by now
	var reached []string
	for app, tag := range s.tags() {
		if tag == "2" && !slices.Contains(canaries, app) {
			reached = append(reached, app)
		}
	}
	if len(reached) == 0 || len(reached) > 3 {
		t.Fatalf("generation 2 reached %d non-canary clusters (%v), want 1 to 3 (maxUnavailable) of step half", len(reached), reached)
	}
	if !slices.ContainsFunc(reached, func(app string) bool { return strings.Contains(halted, app) }) {
		t.Errorf("the halt condition names none of the Degraded Applications %v: %s", reached, halted)
	}
	if _, _, updated := s.rollout(operatorNS, "agent"); updated["rest"] != 0 {
		t.Errorf("step rest has %d clusters updated after the halt at step half", updated["rest"])
	}

	// Everything is on the bus: argo-syncer's health reports and the rollouts' moves.
	moves := map[int64][]string{}
	degradedReports := 0
	for _, e := range s.audit() {
		switch e := e.(type) {
		case *events.RolloutProgressed:
			moves[e.Rule.Generation] = append(moves[e.Rule.Generation], e.Step+":"+e.Phase)
		case *events.ApplicationHealth:
			if e.Health == events.HealthDegraded && e.Observed {
				degradedReports++
			}
		}
	}
	for gen, want := range map[int64][]string{
		1: {"canary:StepStarted", "canary:Baking", "canary:StepCompleted", "half:AwaitingApproval", "half:StepStarted", "rest:StepStarted", ":Completed"},
		2: {"canary:StepStarted", "canary:Baking", "canary:StepCompleted", "half:StepStarted", "half:Halted"},
	} {
		for _, m := range want {
			if !slices.Contains(moves[gen], m) {
				t.Errorf("generation %d: no %s on the bus; its moves: %v", gen, m, moves[gen])
			}
		}
	}
	if degradedReports == 0 {
		t.Error("no Degraded ApplicationHealth report on the bus")
	}

	// The edit back rolls back: every cluster generation 2 reached returns to 1 at once (the
	// stable generation), and the new rollout completes.
	s.editRule(operatorNS, "agent", "1", map[string]string{"enforcement.globo.com/approve-rollout": "generation/3/step/half"})
	testenv.Eventually(t, 120*time.Second, func() error {
		for app, tag := range s.tags() {
			if tag != "1" {
				return fmt.Errorf("%s still runs image.tag %s", app, tag)
			}
		}
		if phase, step, _ := s.rollout(operatorNS, "agent"); phase != "Complete" {
			return fmt.Errorf("rollout of generation 3 is %s at step %s", phase, step)
		}
		return nil
	})
	checkNoDuplicates(t, s)
}

// lastHealth says how many Application health reports are on the bus, and the last one.
func (s *system) lastHealth() string {
	var last *events.ApplicationHealth
	n := 0
	for _, ev := range s.audit() {
		if h, ok := ev.(*events.ApplicationHealth); ok {
			last, n = h, n+1
		}
	}
	return fmt.Sprintf("%d Application health reports on the bus, the last %+v", n, last)
}
