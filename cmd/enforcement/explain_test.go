package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// explainFleet publishes the story of two clusters and two rules, interleaved, as the services
// would: what explain and events must pick apart.
func explainFleet(t *testing.T, pub *events.Publisher) {
	t.Helper()
	src := events.SourceRef{Kind: "static", ID: "static-1"}
	fleet := events.RuleRef{Namespace: "team-a", Name: "fleet", UID: "u1", Generation: 2}
	other := events.RuleRef{Namespace: "team-b", Name: "other", UID: "u2", Generation: 1}
	eu := events.Cluster{Name: "prod-eu", Key: "prod-eu", URL: "https://eu", Source: src, Eligible: true, Labels: map[string]string{"env": "prod"}}
	us := events.Cluster{Name: "prod-us", Key: "prod-us", URL: "https://us", Source: src, Eligible: true}
	target := func(c events.Cluster) events.Target {
		return events.Target{Name: c.Name, Key: c.Key, URL: c.URL, Source: c.Source, Revision: 1}
	}
	in := &events.InstallIntent{Rule: fleet, Cluster: target(eu), Enforcement: events.Enforcement{Name: "guestbook", Repo: "https://git/x"}, SpecHash: "h1"}
	for _, ev := range []events.Event{
		&events.ClusterAppeared{Cluster: eu, Revision: 1},
		&events.ClusterAppeared{Cluster: us, Revision: 1},
		in,
		&events.InstallIntent{Rule: other, Cluster: target(us), Enforcement: events.Enforcement{Name: "agent", Repo: "https://git/y"}, SpecHash: "h2"},
		&events.InstallSucceeded{IntentID: in.ID(), Rule: fleet, Cluster: "prod-eu", Enforcement: "guestbook", Application: "prod-eu-guestbook", Created: true},
		&events.SourceDegraded{Source: src, Scan: 7, Reason: events.DegradedRemovalsHeld, Message: "2 of 2 clusters absent", Known: 2, HeldRemovals: []string{"prod-eu"}},
		&events.UninstallIntent{Rule: fleet, Cluster: target(eu), Enforcement: "guestbook", Reason: events.UninstallNoLongerMatches, DeletionPolicy: events.DeletionOrphan},
	} {
		if _, err := pub.Publish(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
}

// TestExplain: explain cluster and explain rule print, oldest first and one line each, exactly
// the decisions about the cluster or the rule (the other cluster's and rule's events left out by
// the subject filters, the source's held removals kept because they name the cluster), and a
// name with no events or a malformed rule name says so. No rule engine runs here: explain
// cluster and explain rule print the history, then say why the current verdicts are
// unavailable, and succeed (TestExplainClusterCommand asks a running one).
func TestExplain(t *testing.T) {
	srv := testenv.StartNATS(t)
	_, js := eventstest.Bus(t, srv.URL())
	explainFleet(t, events.NewPublisher(js, "/test"))
	env := map[string]string{"NATS_URL": srv.URL()}
	cli := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(context.Background(), args, func(k string) string { return env[k] }, &out, &out)
		return out.String(), err
	}
	lines := func(out string) []string {
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			// "2026-12-02 12:00:00  #3      text": drop the time and sequence
			if f := strings.SplitN(l, "  ", 3); len(f) == 3 && strings.HasPrefix(f[1], "#") {
				l = strings.TrimLeft(f[2], " ")
			}
			got = append(got, l)
		}
		return got
	}

	out, err := cli("explain", "cluster", "prod-eu")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"Discovered cluster prod-eu (static, eligible); labels env=prod",
		"Rule team-a/fleet (generation 2) matched prod-eu: install guestbook",
		"Created Application argocd/prod-eu-guestbook",
		"Source static/static-1 degraded (RemovalsHeld): 2 of 2 clusters absent; nothing removed; held removals: prod-eu",
		"Rule team-a/fleet (generation 2) lets go of guestbook on prod-eu: NoLongerMatches, deletionPolicy Orphan",
		"",
		"Rules now: unavailable, the history above is all there is: no rule engine answers on enforcement-api.rule-engine.explain-cluster: is rule-engine running, in a version that serves it?",
	}
	if got := lines(out); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("explain cluster prod-eu:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d  #1 `).MatchString(out) {
		t.Errorf("explain lines lack the time and stream sequence:\n%s", out)
	}

	out, err = cli("explain", "rule", "team-b/other")
	if err != nil {
		t.Fatal(err)
	}
	want = []string{
		"Rule team-b/other (generation 1) matched prod-us: install agent",
		"",
		"Clusters now: unavailable, the history above is all there is: no rule engine answers on enforcement-api.rule-engine.explain-rule: is rule-engine running, in a version that serves it?",
	}
	if got := lines(out); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("explain rule team-b/other:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	out, err = cli("explain", "cluster", "nowhere")
	if err != nil || !strings.Contains(out, "No event about cluster nowhere in the stream ENFORCEMENT") {
		t.Errorf("explain cluster nowhere: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"explain"}, {"explain", "rule", "fleet"}, {"explain", "node", "x"}, {"explain", "rule", "a/b/c"},
		{"explain", "cluster", "--all", "prod-eu"}} {
		if _, err := cli(args...); err == nil {
			t.Errorf("%q succeeded", args)
		}
	}
}

// TestEventsFilters: events prints the stored events one line each, narrowed by cluster, rule and
// type; unknown types and flags are refused with the reason; --follow prints new events as they
// come, and only new ones.
func TestEventsFilters(t *testing.T) {
	srv := testenv.StartNATS(t)
	_, js := eventstest.Bus(t, srv.URL())
	pub := events.NewPublisher(js, "/test")
	explainFleet(t, pub)
	env := map[string]string{"NATS_URL": srv.URL()}
	cli := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(context.Background(), append([]string{"events"}, args...), func(k string) string { return env[k] }, &out, &out)
		return out.String(), err
	}
	count := func(out string) int { return len(strings.Split(strings.TrimSpace(out), "\n")) }

	if out, err := cli(); err != nil || count(out) != 7 {
		t.Errorf("events: %v, %d lines\n%s", err, count(out), out)
	}
	if out, err := cli("--cluster", "prod-us"); err != nil || count(out) != 2 || strings.Contains(out, "prod-eu") {
		t.Errorf("events --cluster prod-us: %v\n%s", err, out)
	}
	out, err := cli("--rule", "team-a/fleet", "--type", "intent.install", "--type", "io.enforcement.intent.uninstall.v1")
	if err != nil || count(out) != 2 || !strings.Contains(out, "install guestbook") || !strings.Contains(out, "lets go of guestbook") {
		t.Errorf("events --rule team-a/fleet --type ...: %v\n%s", err, out)
	}
	if out, err := cli("--cluster", "prod-eu", "--rule", "team-b/other"); err != nil || out != "" {
		t.Errorf("events for a rule that never touched the cluster: %v\n%q", err, out)
	}
	for args, msg := range map[string]string{
		"--type install.exploded":             `unknown event type "install.exploded"`,
		"--rule fleet":                        `--rule "fleet": want NAMESPACE/NAME`,
		"--cluster x --type source.recovered": "no event type of [io.enforcement.source.recovered.v1] has the keys [cluster]",
		"--colour red":                        "flag provided but not defined: -colour",
	} {
		if _, err := cli(strings.Fields(args)...); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("events %s: %v, want %q", args, err, msg)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	var out2 testenv.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"events", "--follow", "--cluster", "prod-us"}, func(k string) string { return env[k] }, &out2, &out2)
	}()
	time.Sleep(500 * time.Millisecond) // the consumer starts at "now"
	if _, err := pub.Publish(context.Background(), &events.ClusterGone{Source: events.SourceRef{Kind: "static", ID: "static-1"}, Name: "prod-us", Key: "prod-us", Revision: 2}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(out2.String(), "Cluster prod-us is gone from its source") {
			return fmt.Errorf("follow printed %q", out2.String())
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("events --follow ended with %v", err)
	}
	if count(out2.String()) != 1 {
		t.Errorf("events --follow printed stored events too:\n%s", out2.String())
	}
}

// TestExplainClusterCommand runs `enforcement explain cluster` and `explain rule` against the
// real rule-engine (built and started as a process with its own NATS user of the shipped
// authorization, as deployed) on a real API server: after the cluster's history, "Rules now:"
// gives each live rule's verdict (the one that matches and what it installs, one whose label
// differs, a tenant's rule no ClusterRuleGrant permits); a name no source lists says so; before
// the rule engine runs the history is printed with a line saying why the verdicts are
// unavailable, and the command succeeds. After a rule's history, "Clusters now:" gives each
// cluster of its source (matches, or why not); a tenant's rule without a grant gets its clusters
// counted as NotPermitted and none named; a rule the API server does not have says so; over 50
// clusters are grouped by reason, and --all lists each one.
func TestExplainClusterCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs rule-engine")
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	srv := testenv.StartNATS(t, testenv.WithAuthorization(t, testenv.ShippedAuthorization(t)))
	const operator = "enforcement-operator"
	js := srv.JetStream(t, nats.UserInfo(operator, testenv.NATSPassword(operator)))
	if err := events.DefaultTopology(events.TopologyOptions{}).Apply(ctx, js); err != nil {
		t.Fatal(err)
	}
	kube := testenv.StartKube(t)
	kube.InstallCRDsFromDir(t, filepath.Join(root, "deploy", "k8s", "enforcement-crds", "crds"))
	ns, tenant := kube.Namespace(t, "enforcement"), kube.Namespace(t, "team-x")
	for _, manifest := range []string{
		"metadata: {name: fleet, namespace: enforcement}\nspec: {source: {static: {labels: {env: prod}}}, enforcements: [{name: guestbook, repo: https://git.example/guestbook}]}",
		"metadata: {name: dev, namespace: enforcement}\nspec: {source: {static: {labels: {env: dev}}}, enforcements: [{name: debug, repo: https://git.example/debug}]}",
		"metadata: {name: tenant, namespace: team-x}\nspec: {source: {static: {labels: {env: prod}}}, enforcements: [{name: team, repo: https://git.example/team}]}",
	} {
		rule := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte("apiVersion: enforcement.globo.com/v1beta1\nkind: ClusterRule\n"+manifest), &rule.Object); err != nil {
			t.Fatal(err)
		}
		if err := kube.Client.Create(ctx, rule); err != nil {
			t.Fatal(err)
		}
	}
	src := events.NewSourceRef(events.SourceKindStatic, "enforcement", "", nil)
	pub := events.NewPublisher(js, "/test")
	for i, c := range []events.Cluster{
		{Name: "prod-a", Key: "prod-a", URL: "https://prod-a.example", Source: src, Eligible: true, State: "active", Labels: map[string]string{"env": "prod"}},
		{Name: "dev-b", Key: "dev-b", URL: "https://dev-b.example", Source: src, Eligible: true, Labels: map[string]string{"env": "dev"}},
	} {
		if _, err := pub.Publish(ctx, &events.ClusterAppeared{Cluster: c, Revision: uint64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"NATS_URL": srv.URL(), "NATS_USER": operator, "NATS_PASSWORD": testenv.NATSPassword(operator)}
	cli := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, append([]string{"explain", "cluster"}, args...), func(k string) string { return env[k] }, &out, &out)
		return out.String(), err
	}

	out, err := cli("prod-a")
	if err != nil || !strings.Contains(out, "Discovered cluster prod-a (static, eligible); labels env=prod\n\n"+
		"Rules now: unavailable, the history above is all there is: no rule engine answers on enforcement-api.rule-engine.explain-cluster: is rule-engine running") {
		t.Errorf("explain without a rule engine: %v\n%s", err, out)
	}

	startRuleEngine(t, root, srv.URL(), kube.Kubeconfig, ns+","+tenant)
	want := "\nRules now:\n" +
		"Cluster prod-a of source static " + src.ID + ": eligible (state active); labels env=prod\n" +
		"  enforcement/dev: does not match: label env is \"prod\" (want \"dev\")\n" +
		"  enforcement/fleet: matches, installs guestbook\n" +
		"  team-x/tenant: does not match: no ClusterRuleGrant permits the rule (NotPermitted): no ClusterRuleGrant in enforcement covers namespace team-x; rules outside enforcement act only within a grant\n"
	testenv.Eventually(t, 30*time.Second, func() error {
		out, err = cli("prod-a")
		if err != nil || !strings.HasSuffix(out, want) || !strings.Contains(out, "Rule enforcement/fleet (generation 1) matched prod-a: install guestbook\n") {
			return fmt.Errorf("explain cluster prod-a: %w\n%s\nwant it to end with:\n%s", err, out, want)
		}
		return nil
	})

	out, err = cli("nowhere")
	if err != nil || !strings.HasSuffix(out, "No event about cluster nowhere in the stream ENFORCEMENT (it keeps events for its max age, 30 days by default).\n\n"+
		"Rules now: no source lists a cluster named nowhere in the rule engine's view, so no rule matches it.\n") {
		t.Errorf("explain cluster nowhere: %v\n%s", err, out)
	}
	rule := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, append([]string{"explain", "rule"}, args...), func(k string) string { return env[k] }, &out, &out)
		return out.String(), err
	}
	out, err = rule("enforcement/fleet")
	want = "\nClusters now: rule enforcement/fleet (generation 1) matches 1 of the 2 cluster(s) of source static " + src.ID + "\n" +
		"  dev-b: does not match: label env is \"dev\" (want \"prod\")\n" +
		"  prod-a: matches\n"
	if err != nil || !strings.HasSuffix(out, want) || !strings.Contains(out, "Rule enforcement/fleet (generation 1) matched prod-a: install guestbook\n") {
		t.Errorf("explain rule enforcement/fleet: %v\n%s\nwant it to end with:\n%s", err, out, want)
	}
	noEvent := func(rule string) string {
		return "No event about rule " + rule + " in the stream ENFORCEMENT (it keeps events for its max age, 30 days by default).\n\n"
	}
	out, err = rule("team-x/tenant")
	want = noEvent("team-x/tenant") +
		"Clusters now: rule team-x/tenant (generation 1) matches 0 of the 2 cluster(s) of source static " + src.ID + "\n" +
		"  2 cluster(s): does not match: no ClusterRuleGrant permits the rule (NotPermitted): no ClusterRuleGrant in enforcement covers namespace team-x; " +
		"rules outside enforcement act only within a grant (not named: the rule is outside the operator's namespace and may not target them)\n"
	if err != nil || out != want {
		t.Errorf("explain rule team-x/tenant: %v\n%s\nwant:\n%s", err, out, want)
	}
	out, err = rule("enforcement/nope")
	if want := noEvent("enforcement/nope") + "Clusters now: none, there is no ClusterRule enforcement/nope on the API server.\n"; err != nil || out != want {
		t.Errorf("explain rule enforcement/nope: %v\n%s\nwant:\n%s", err, out, want)
	}

	// A long list: 55 more clusters no rule selects.
	for i := range 55 {
		name := fmt.Sprintf("bulk-%02d", i)
		c := events.Cluster{Name: name, Key: name, URL: "https://" + name + ".example", Source: src, Eligible: true, Labels: map[string]string{"env": "stage"}}
		if _, err := pub.Publish(ctx, &events.ClusterAppeared{Cluster: c, Revision: uint64(i + 3)}); err != nil {
			t.Fatal(err)
		}
	}
	want = "\nClusters now: rule enforcement/fleet (generation 1) matches 1 of the 57 cluster(s) of source static " + src.ID + "\n" +
		"  55 cluster(s): does not match: label env is \"stage\" (want \"prod\") (bulk-00, bulk-01, bulk-02, bulk-03, bulk-04, ...)\n" +
		"  1 cluster(s): does not match: label env is \"dev\" (want \"prod\") (dev-b)\n" +
		"  1 cluster(s): matches (prod-a)\n" +
		"  (enforcement explain rule --all enforcement/fleet lists each cluster)\n"
	testenv.Eventually(t, 30*time.Second, func() error {
		out, err = rule("enforcement/fleet")
		if err != nil || !strings.HasSuffix(out, want) {
			return fmt.Errorf("explain rule enforcement/fleet with 57 clusters: %w\n%s\nwant it to end with:\n%s", err, out, want)
		}
		return nil
	})
	out, err = rule("--all", "enforcement/fleet")
	_, section, _ := strings.Cut(out, "\nClusters now: ")
	if err != nil || strings.Count(section, "\n  ") != 57 || !strings.Contains(section, "\n  bulk-54: does not match: label env is \"stage\" (want \"prod\")\n") {
		t.Errorf("explain rule --all enforcement/fleet: %v\n%s", err, out)
	}
}
