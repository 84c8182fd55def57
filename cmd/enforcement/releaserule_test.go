package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// TestReleaseRuleEdit: release-removals lists the rule edits rule-engine's breaker holds (from
// its state bucket) and releases one, named by rule and generation, by publishing the rule
// removals released event; a rule or generation that holds nothing is refused, nothing published.
func TestReleaseRuleEdit(t *testing.T) {
	srv := testenv.StartNATS(t)
	_, js := eventstest.Bus(t, srv.URL())
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, events.BucketRuleEngineState)
	if err != nil {
		t.Fatal(err)
	}
	putRuleRecord(t, kv, "held", "team-a/fleet", map[string]any{"generation": 4, "installed": 20, "cap": 2,
		"clusters": map[string]string{"s.YQ": "c03", "s.Yg": "c01", "s.Yw": "c02", "s.ZA": "c00"}})
	env := map[string]string{"NATS_URL": srv.URL(), "USER": "ops"}
	cli := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, append([]string{"release-removals"}, args...), func(k string) string { return env[k] }, &out, &out)
		return out.String(), err
	}
	reader := eventstest.NewReader(t, js)

	out, err := cli()
	if err != nil || strings.Contains(out, "No removals are held") ||
		!strings.Contains(out, "team-a/fleet  4           4     c00, c01, c02 and 1 more  enforcement release-removals team-a/fleet generation/4") {
		t.Fatalf("listing: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"team-a/fleet", "generation/3"}, {"team-a/other", "generation/4"}, {"fleet", "generation/4"}, {"team-a/fleet", "generation/x"}} {
		if _, err := cli(args...); err == nil {
			t.Errorf("release-removals %q succeeded", args)
		}
	}
	if _, err := cli("team-a/fleet", "generation/3"); err == nil || !strings.Contains(err.Error(), "generation 3 of rule team-a/fleet holds no removal; generation 4 does") {
		t.Errorf("generation 3: %v", err)
	}
	if evs := reader.New(t); len(evs) != 0 {
		t.Fatalf("refused releases published %d events", len(evs))
	}

	out, err = cli("team-a/fleet", "generation/4")
	if err != nil || !strings.Contains(out, "Released generation 4 of rule team-a/fleet (4 clusters: c00, c01, c02 and 1 more)") {
		t.Fatalf("release: %q, %v", out, err)
	}
	evs := reader.New(t)
	if len(evs) != 1 {
		t.Fatalf("release published %d events", len(evs))
	}
	got, ok := evs[0].(*events.RuleRemovalsReleased)
	if !ok || !strings.HasPrefix(got.By, "ops@") {
		t.Fatalf("release published %#v", evs[0])
	}
	got.By = ""
	want := &events.RuleRemovalsReleased{Rule: events.RuleRef{Namespace: "team-a", Name: "fleet", Generation: 4}, Clusters: []string{"c00", "c01", "c02", "c03"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("release published %+v, want %+v", got, want)
	}
}

// putRuleRecord writes rec where rule-engine keeps a rule's record of the kind in its state
// bucket, "<kind>.<base64 namespace/name>", which readRuleRecords reads.
func putRuleRecord(t *testing.T, kv jetstream.KeyValue, kind, rule string, rec any) {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), kind+"."+base64.RawURLEncoding.EncodeToString([]byte(rule)), b); err != nil {
		t.Fatal(err)
	}
}
