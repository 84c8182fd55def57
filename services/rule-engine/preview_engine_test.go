package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// TestPreviewRuleDecisions runs the preview's decision part on the engine's own state (an
// in-memory store, no API server): an edit's update with its diff and the removals of a cluster
// no longer selected, an edit the breaker holds, and a new rule; the store is left exactly as
// it was (no record, hold or cached render written), and the live engine's state is untouched.
func TestPreviewRuleDecisions(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	e := testEngine(st, &recordingPublisher{}, newMetrics(nil))
	for i, c := range []events.Cluster{
		cluster("prod-a", map[string]string{"env": "prod"}), cluster("prod-b", map[string]string{"env": "prod"}),
		cluster("dev-c", map[string]string{"env": "dev"}),
	} {
		if err := e.applyCluster(ctx, c, uint64(i+1), 0); err != nil {
			t.Fatal(err)
		}
	}
	// In OPERATOR_NAMESPACE: a rule of another namespace would need its ClusterRuleGrant read
	// from the API server (TestPreview covers that).
	rs, err := clusterRuleSchema()
	if err != nil {
		t.Fatal(err)
	}
	parse := func(manifest string) *v1beta1.ClusterRule {
		cr, err := parseRule(ctx, rs, []byte(strings.ReplaceAll(manifest, "NS", "enforcement")))
		if err != nil {
			t.Fatal(err)
		}
		return cr
	}
	live := parse(fleetRule)
	live.UID, live.Generation = types.UID("uid-1"), 1
	if err := e.applyRule(ctx, ruleFromSpec(live, "enforcement")); err != nil {
		t.Fatal(err)
	}
	snapshot := func() string {
		st.mu.Lock()
		defer st.mu.Unlock()
		b, err := json.Marshal([]any{st.clusters, st.pairs, st.renders, st.failures, st.held, st.listed, st.degraded})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	before := snapshot()
	p := &previewer{store: st, renderer: e.renderer, degradedTTL: time.Minute, maxRemovalFraction: 0.1, operatorNamespace: "enforcement"}

	edit := strings.Replace(fleetRule, "labels: {env: prod}", "labels: {env: prod}\n      ignore: [prod-b]", 1)
	res, err := p.previewRule(ctx, parse(strings.Replace(edit, `"${{ name }}"`, `"${{ name }}-v2"`, 1)), live)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := changeLines(res), "update prod-a agent\ndelete prod-b agent NoLongerMatches\ndelete prod-b guestbook NoLongerMatches"; got != want {
		t.Errorf("edit:\n%s\nwant:\n%s", got, want)
	}
	if d := res.Changes[0].Diff; !strings.Contains(d, "-   value: prod-a\n") || !strings.Contains(d, "+   value: prod-a-v2\n") {
		t.Errorf("diff of prod-a agent:\n%s", d)
	}
	if res.Unchanged != 1 || res.Rule.Generation != 2 || res.Held != nil {
		t.Errorf("edit: unchanged %d, generation %d, held %+v", res.Unchanged, res.Rule.Generation, res.Held)
	}

	res, err = p.previewRule(ctx, parse(strings.Replace(fleetRule, "env: prod", "env: staging", 1)), live)
	if err != nil {
		t.Fatal(err)
	}
	if res.Held == nil || strings.Join(res.Held.Clusters, ",") != "prod-a,prod-b" || len(res.Changes) != 4 || !res.Changes[3].Held {
		t.Errorf("held edit: %+v, changes:\n%s", res.Held, changeLines(res))
	}

	res, err = p.previewRule(ctx, parse(strings.Replace(strings.Replace(fleetRule, "name: fleet", "name: fresh", 1), "env: prod", "env: dev", 1)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := changeLines(res); got != "create dev-c agent\ncreate dev-c guestbook" || res.Changes[1].Before != nil {
		t.Errorf("new rule:\n%s", got)
	}
	if after := snapshot(); after != before {
		t.Errorf("previews wrote to the store:\nbefore %s\nafter  %s", before, after)
	}
	if len(e.pairs["enforcement/fleet"]) != 2 || e.held["enforcement/fleet"] != nil {
		t.Errorf("the live engine's state changed: pairs %v held %v", e.pairs["enforcement/fleet"], e.held["enforcement/fleet"])
	}
}

// specDiff shows a changed line as removed and added, and nothing for equal specs.
func TestSpecDiff(t *testing.T) {
	a := &events.Enforcement{Name: "x", Repo: "r", Path: "p1", Namespace: "default"}
	b := *a
	b.Path = "p2"
	if got, want := specDiff(a, &b), "  name: x\n  namespace: default\n- path: p1\n+ path: p2\n  repo: r\n"; got != want {
		t.Errorf("specDiff:\n%s\nwant:\n%s", got, want)
	}
	if got := specDiff(a, a); got != "" {
		t.Errorf("equal specs: %q", got)
	}
	if out, _ := yaml.Marshal(a); specDiff(nil, a) != "+ "+strings.ReplaceAll(strings.TrimSuffix(string(out), "\n"), "\n", "\n+ ")+"\n" {
		t.Errorf("create: %q", specDiff(nil, a))
	}
}
