package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/nats-io/nats.go/micro"
	"sigs.k8s.io/yaml"
)

// fleetRule is the rule the preview tests install, then edit: prod clusters get a static
// package and one templated per cluster.
const fleetRule = `apiVersion: enforcement.globo.com/v1beta1
kind: ClusterRule
metadata:
  name: fleet
  namespace: NS
spec:
  source:
    rancher:
      labels: {env: prod}
  enforcements:
  - name: guestbook
    repo: https://github.com/argoproj/argocd-example-apps
    path: guestbook
  - name: agent
    repo: https://git.example/agent
    helm:
      parameters:
        cluster: "${{ name }}"
`

// previewOf asks the running rule engine for a preview, as the command line does, and returns
// the result or the micro error ("400: ...").
func (e *env) previewOf(manifest string) (*events.PreviewResult, string) {
	e.t.Helper()
	body, err := json.Marshal(events.PreviewRequest{Rule: strings.ReplaceAll(manifest, "NS", e.ns)})
	if err != nil {
		e.t.Fatal(err)
	}
	msg, err := e.nc.Request(events.PreviewSubject, body, 30*time.Second)
	if err != nil {
		e.t.Fatalf("preview request: %v", err)
	}
	if desc := msg.Header.Get(micro.ErrorHeader); desc != "" {
		return nil, msg.Header.Get(micro.ErrorCodeHeader) + ": " + desc
	}
	var res events.PreviewResult
	if err := json.Unmarshal(msg.Data, &res); err != nil {
		e.t.Fatal(err)
	}
	return &res, ""
}

// lastSeqs are the last sequences of the event stream and the rule engine's buckets: a write
// anywhere moves one.
func (e *env) lastSeqs() string {
	e.t.Helper()
	var out []string
	for _, name := range []string{events.StreamName, "KV_" + events.BucketRuleEngineState, "KV_" + events.BucketRenderCache} {
		s, err := e.js.Stream(context.Background(), name)
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s=%d", name, s.CachedInfo().State.LastSeq))
	}
	return strings.Join(out, " ")
}

// waitStill waits until the stream and the rule engine's buckets stop moving (the records are
// written after the intents are published) and returns their last sequences (lastSeqs).
func (e *env) waitStill() string {
	e.t.Helper()
	before := e.lastSeqs()
	testenv.Eventually(e.t, 10*time.Second, func() error {
		time.Sleep(300 * time.Millisecond)
		now := e.lastSeqs()
		if now != before {
			before = now
			return fmt.Errorf("still writing: %s", now)
		}
		return nil
	})
	return before
}

// changeLines summarises changes as "action cluster enforcement [reason] [held]".
func changeLines(res *events.PreviewResult) string {
	var s []string
	for _, c := range res.Changes {
		l := c.Action + " " + c.Cluster + " " + c.Enforcement
		if c.Reason != "" {
			l += " " + c.Reason
		}
		if c.Held {
			l += " held"
		}
		s = append(s, l)
	}
	return strings.Join(s, "\n")
}

// TestPreview runs the rule engine for real and previews an edit of an installed rule (an
// update with its diff, the removals of a cluster it stops selecting), an edit the blast-radius
// guard would hold, and a new rule, against the live cluster view, checking that nothing is
// written: no event, no record, no cached render. Bad manifests get a 400 naming the problem,
// and previews go on working after them.
func TestPreview(t *testing.T) {
	e := newEnv(t)
	e.start()
	e.publish(appeared(testCluster("prod-a", map[string]string{"env": "prod"}, true), 1),
		appeared(testCluster("prod-b", map[string]string{"env": "prod"}, true), 2),
		appeared(testCluster("dev-c", map[string]string{"env": "dev"}, true), 3),
		appeared(testCluster("prod-d", map[string]string{"env": "prod"}, false), 4))
	var cr v1beta1.ClusterRule
	if err := yaml.Unmarshal([]byte(strings.ReplaceAll(fleetRule, "NS", e.ns)), &cr); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Create(context.Background(), &cr); err != nil {
		t.Fatal(err)
	}
	e.waitIntentSet("install prod-a guestbook", "install prod-a agent", "install prod-b guestbook", "install prod-b agent")
	before := e.waitStill()

	// The same manifest: nothing to do.
	res, msg := e.previewOf(fleetRule)
	if msg != "" || changeLines(res) != "" || res.Unchanged != 4 || !res.Existing {
		t.Fatalf("preview of the installed rule: %s %+v", msg, res)
	}

	// An edit: the agent's parameter changes, prod-b is ignored from now on.
	edit := strings.Replace(fleetRule, "labels: {env: prod}", "labels: {env: prod}\n      ignore: [prod-b]", 1)
	edit = strings.Replace(edit, `"${{ name }}"`, `"${{ name }}-v2"`, 1)
	res, msg = e.previewOf(edit)
	if msg != "" {
		t.Fatal(msg)
	}
	if got, want := changeLines(res), "update prod-a agent\ndelete prod-b agent NoLongerMatches\ndelete prod-b guestbook NoLongerMatches"; got != want {
		t.Errorf("edit changes:\n%s\nwant:\n%s", got, want)
	}
	if res.Rule.Generation != res.LiveGeneration+1 || res.Unchanged != 1 || res.Held != nil {
		t.Errorf("edit: generation %d (live %d), unchanged %d, held %+v", res.Rule.Generation, res.LiveGeneration, res.Unchanged, res.Held)
	}
	if d := res.Changes[0].Diff; !strings.Contains(d, "-   value: prod-a\n") || !strings.Contains(d, "+   value: prod-a-v2\n") ||
		res.Changes[0].Application != "prod-a-agent" || res.Changes[0].Before == nil || res.Changes[0].BeforeUnknown {
		t.Errorf("update of prod-a agent: %+v\ndiff:\n%s", res.Changes[0], d)
	}
	if c := res.Changes[2]; c.DeletionPolicy != events.DeletionOrphan || c.Before == nil || !strings.Contains(c.Diff, "- path: guestbook") {
		t.Errorf("delete of prod-b guestbook: %+v", c)
	}
	var clusters []string
	for _, c := range res.Clusters {
		clusters = append(clusters, fmt.Sprintf("%s %v %s", c.Name, c.Matches, c.Reason))
	}
	if got, want := strings.Join(clusters, "\n"), "dev-c false label env is \"dev\" (want \"prod\")\nprod-a true \nprod-b false ignored by name\nprod-d false not eligible: active"; got != want {
		t.Errorf("clusters:\n%s\nwant:\n%s", got, want)
	}

	// An edit that lets go of both clusters: over the breaker's cap (1 of 2), held.
	res, msg = e.previewOf(strings.Replace(fleetRule, "env: prod", "env: staging", 1))
	if msg != "" {
		t.Fatal(msg)
	}
	if got, want := changeLines(res), "delete prod-a agent NoLongerMatches held\ndelete prod-a guestbook NoLongerMatches held\n"+
		"delete prod-b agent NoLongerMatches held\ndelete prod-b guestbook NoLongerMatches held"; got != want {
		t.Errorf("held edit changes:\n%s\nwant:\n%s", got, want)
	}
	if res.Held == nil || res.Unchanged != 0 || strings.Join(res.Held.Clusters, ",") != "prod-a,prod-b" || res.Held.Cap != 1 || res.Held.Installed != 2 ||
		!strings.Contains(res.Held.Message, "enforcement release-removals "+e.ns+"/fleet generation/2") {
		t.Errorf("held: %+v", res.Held)
	}

	// A new rule: creates, no previous spec.
	fresh := strings.Replace(strings.Replace(fleetRule, "name: fleet", "name: fresh", 1), "env: prod", "env: dev", 1)
	res, msg = e.previewOf(fresh)
	if msg != "" {
		t.Fatal(msg)
	}
	if got, want := changeLines(res), "create dev-c agent\ncreate dev-c guestbook"; got != want || res.Existing || res.Rule.Generation != 1 {
		t.Errorf("new rule: existing %v generation %d, changes:\n%s\nwant:\n%s", res.Existing, res.Rule.Generation, got, want)
	}
	if c := res.Changes[0]; c.Before != nil || !strings.Contains(c.Diff, "+   value: dev-c\n") {
		t.Errorf("create of dev-c agent: %+v", c)
	}

	for _, tt := range []struct{ manifest, want string }{
		{"", "400: the rule manifest is empty"},
		{fleetRule + "---\n" + fresh, "400: the manifest holds 2 documents; preview takes one ClusterRule"},
		{strings.Replace(fleetRule, "path: guestbook", "paht: guestbook", 1), `400: ClusterRule in version "v1beta1" cannot be handled as a ClusterRule: strict decoding error: unknown field "spec.enforcements[0].paht"`},
		{strings.Replace(fleetRule, "kind: ClusterRule", "kind: Application", 1), `400: apiVersion "enforcement.globo.com/v1beta1", kind "Application": want enforcement.globo.com/v1beta1, ClusterRule`},
		{strings.Replace(fleetRule, "  namespace: NS\n", "", 1), "400: metadata.namespace is required"},
		{strings.Replace(fleetRule, "  name: fleet\n", "", 1), "400: metadata.name is required"},
		{strings.Replace(fleetRule, "namespace: NS", "namespace: elsewhere", 1), "400: namespace elsewhere is not one this rule engine watches"},
		{strings.Replace(fleetRule, "rancher:", "rancher: {}\n    matchExpressions: [{key: env, operator: Sideways}]\n    unused:", 1), `400: ClusterRule in version "v1beta1" cannot be handled as a ClusterRule: strict decoding error: unknown field "spec.source.unused"`},
		{"just: [text", "400: read the ClusterRule: yaml: line 1: did not find expected ',' or ']'"},
		{"- a list", "400: read the ClusterRule: not a YAML object"},
		{strings.Replace(fleetRule, "  name: fleet\n", "  name: fleet\n  name: twice\n", 1), `400: read the ClusterRule: yaml: unmarshal errors:   line 5: key "name" already set in map`},
		{strings.Replace(fleetRule, "rancher:\n      labels: {env: prod}", "rancher: {}\n    matchExpressions: [{key: env, operator: Sideways}]", 1),
			"400: the rule is invalid, so applying it would change nothing (its status would say so): source.matchLabels/matchExpressions"},
	} {
		if res, msg := e.previewOf(tt.manifest); !strings.HasPrefix(msg, tt.want) {
			t.Errorf("preview of a bad manifest: %q, %+v; want %q", msg, res, tt.want)
		}
	}
	if res, msg := e.previewOf(fleetRule); msg != "" || res.Unchanged != 4 {
		t.Errorf("preview after bad manifests: %s %+v", msg, res)
	}
	if after := e.lastSeqs(); after != before {
		t.Errorf("previews wrote: before %s, after %s", before, after)
	}
}
