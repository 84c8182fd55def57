package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"sigs.k8s.io/yaml"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// TestPreviewCommand runs `enforcement preview` against the real rule-engine (built from the
// repository and started as a process, each with its own NATS user of the shipped
// authorization, as deployed) on a real API server: the text for people, -o json and -o yaml
// for scripts, and the errors a user sees for a bad manifest, bad flags and a rule engine that
// is not running.
func TestPreviewCommand(t *testing.T) {
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
	opts := nats.UserInfo(operator, testenv.NATSPassword(operator))
	js := srv.JetStream(t, opts)
	if err := events.DefaultTopology(events.TopologyOptions{}).Apply(ctx, js); err != nil {
		t.Fatal(err)
	}
	kube := testenv.StartKube(t)
	kube.InstallCRDsFromDir(t, filepath.Join(root, "deploy", "k8s", "enforcement-crds", "crds"))
	// The rule lives in OPERATOR_NAMESPACE, so it needs no ClusterRuleGrant (rule-engine
	// TestPreview previews a tenant rule under its grant).
	ns := kube.Namespace(t, "enforcement")

	dir := t.TempDir()
	manifest := filepath.Join(dir, "rule.yaml")
	rule := strings.ReplaceAll(`apiVersion: enforcement.globo.com/v1beta1
kind: ClusterRule
metadata: {name: fleet, namespace: NS}
spec:
  source: {static: {labels: {env: prod}}}
  enforcements:
  - {name: guestbook, repo: "https://github.com/argoproj/argocd-example-apps", path: guestbook}
`, "NS", ns)
	if err := os.WriteFile(manifest, []byte(rule), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"NATS_URL": srv.URL(), "NATS_USER": operator, "NATS_PASSWORD": testenv.NATSPassword(operator)}
	cli := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, append([]string{"preview"}, args...), func(k string) string { return env[k] }, &out, &out)
		return out.String(), err
	}
	if _, err := cli("-f", manifest); err == nil || !strings.Contains(err.Error(), "no rule engine answers on enforcement-api.rule-engine.preview") {
		t.Errorf("preview without a rule engine: %v", err)
	}

	// The cluster view the rule engine decides on: two clusters of the static source.
	src := events.SourceRef{Kind: events.SourceKindStatic, ID: events.SourceID(events.SourceKindStatic, "enforcement", events.SourceKindStatic, nil),
		SecretNamespace: "enforcement", SecretName: events.SourceKindStatic}
	pub := events.NewPublisher(js, "/test")
	for i, c := range []events.Cluster{
		{Name: "prod-a", Key: "prod-a", URL: "https://prod-a.example", Source: src, Eligible: true, Labels: map[string]string{"env": "prod"}},
		{Name: "dev-b", Key: "dev-b", URL: "https://dev-b.example", Source: src, Eligible: true, Labels: map[string]string{"env": "dev"}},
	} {
		if _, err := pub.Publish(ctx, &events.ClusterAppeared{Cluster: c, Revision: uint64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	startRuleEngine(t, root, srv.URL(), kube.Kubeconfig, ns)

	out, err := cli("-f", manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Rule " + ns + "/fleet (new rule), source static ",
		"Clusters: 1 of 2 match",
		`-      dev-b   label env is "dev" (want "prod")`,
		"match  prod-a",
		"Applications: 1 to create, 0 to update, 0 to delete, 0 held, 0 unchanged",
		"  create prod-a-guestbook (cluster prod-a, enforcement guestbook)",
		"    + path: guestbook",
		"Nothing was applied",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("preview output lacks %q:\n%s", want, out)
		}
	}
	out, err = cli("-f", manifest, "-o", "json")
	var res events.PreviewResult
	if err != nil || json.Unmarshal([]byte(out), &res) != nil || len(res.Changes) != 1 || res.Changes[0].After == nil ||
		res.Changes[0].After.Repo != "https://github.com/argoproj/argocd-example-apps" {
		t.Errorf("preview -o json: %v\n%s", err, out)
	}
	out, err = cli("-f", manifest, "-o", "yaml")
	if err != nil || yaml.Unmarshal([]byte(out), &res) != nil || len(res.Clusters) != 2 || !strings.Contains(out, "action: create") {
		t.Errorf("preview -o yaml: %v\n%s", err, out)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(rule, "namespace: "+ns, "namespace: \"\"", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for args, msg := range map[string]string{
		"-f " + bad:                  "preview: metadata.namespace is required",
		"-f " + manifest + " -o xml": `preview: -o "xml": want yaml or json`,
		"":                           "preview: -f FILE is required",
		"-f " + dir + "/missing":     "preview: read " + dir + "/missing: open",
	} {
		if _, err := cli(strings.Fields(args)...); err == nil || !strings.HasPrefix(err.Error(), msg) {
			t.Errorf("preview %s: %v, want %q", args, err, msg)
		}
	}
	if out, err := cli("-f", manifest); err != nil || !strings.Contains(out, "1 to create") {
		t.Errorf("preview after the bad ones: %v\n%s", err, out)
	}
}

// startRuleEngine builds rule-engine and runs it as its own NATS user, watching namespace ns,
// until the test ends.
func startRuleEngine(t *testing.T, root, natsURL, kubeconfig, ns string) {
	t.Helper()
	bin := t.TempDir()
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin+string(filepath.Separator), "./services/rule-engine")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build rule-engine: %v\n%s", err, out)
	}
	var logs testenv.SyncBuffer
	c := &child{name: "rule-engine", healthAddr: testenv.FreeAddr(t), done: make(chan struct{})}
	c.cmd = exec.Command(filepath.Join(bin, "rule-engine"))
	c.cmd.Env = append(os.Environ(), "NATS_URL="+natsURL, "NATS_USER=rule-engine", "NATS_PASSWORD="+testenv.NATSPassword("rule-engine"),
		"KUBECONFIG="+kubeconfig, "WATCH_NAMESPACES="+ns, "HEALTH_ADDR="+c.healthAddr, "METRICS_ADDR="+testenv.FreeAddr(t), "STREAM_REPLICAS=1")
	c.cmd.Stdout, c.cmd.Stderr = &logs, &logs
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		_ = c.cmd.Process.Signal(os.Interrupt)
		<-c.done
		if t.Failed() {
			t.Logf("rule-engine log:\n%s", logs.String())
		}
	})
	if err := waitReady(context.Background(), c); err != nil {
		t.Fatalf("%v\n%s", err, logs.String())
	}
}
