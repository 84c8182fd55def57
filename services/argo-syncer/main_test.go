package main

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// TestRunServesReadyInstallsAndStops starts the service as main does, with a map environment:
// /readyz becomes 200, an intent published to NATS becomes an Application, the logs never show
// the cluster token, and cancelling ctx returns nil promptly.
func TestRunServesReadyInstallsAndStops(t *testing.T) {
	k := testenv.SharedKube(t)
	k.InstallCRDs(t, testenv.ArgoCDCRDs()...)
	ns := k.Namespace(t, "argocd-run")
	nats := testenv.StartNATS(t)
	health, metrics := testenv.FreeAddr(t), testenv.FreeAddr(t)
	envMap := map[string]string{
		"NATS_URL": nats.URL(), "KUBECONFIG": k.Kubeconfig, "ARGOCD_NAMESPACE": ns,
		"HEALTH_ADDR": health, "METRICS_ADDR": metrics,
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs testenv.SyncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, func(k string) string { return envMap[k] }, &logs, &logs) }()

	waitReadyz(t, health)

	// An install through the running service, with its source Secret in OPERATOR_NAMESPACE's
	// default (enforcement) found by kind.
	opNS := k.Namespace(t, "enforcement")
	createSourceSecret(t, k, opNS)
	in := intent("run-1", "agent")
	in.Cluster.Source = events.SourceRef{Kind: "rancher", ID: "s"}
	pubOnce(t, nats.URL(), in)
	eventually(t, "Application created", func() bool {
		_, err := argoClient(t, k).ArgoprojV1alpha1().Applications(ns).Get(context.Background(), "run-1-agent", getOpts)
		return err == nil
	})

	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if !strings.Contains(body.String(), `enforcement_argo_syncer_api_writes_total{kind="Application",result="ok",verb="create"} 1`) {
		t.Errorf("metrics do not count the Application write:\n%s", grepLines(body.String(), "enforcement_argo_syncer"))
	}

	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return within 15s of cancel")
	}
	t.Logf("stopped in %s", time.Since(start))
	if strings.Contains(logs.String(), "token-s3cr3t") {
		t.Fatal("the logs contain the cluster token")
	}
	if !strings.Contains(logs.String(), `"msg":"Created Application"`) {
		t.Errorf("no Created Application log line:\n%s", logs.String())
	}
}

func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	events.NewMetrics(reg, serviceName)
	m.write("Application", "apply", nil)
	m.intent("install", "installed")
	m.healthPublished("Healthy")
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestRunAPIModeWithAWrongPassword starts the service in API mode with a password Argo CD
// refuses: the start logs the refusal, and /readyz is 503 naming it, until the service stops.
func TestRunAPIModeWithAWrongPassword(t *testing.T) {
	k := testenv.SharedKube(t)
	argocd := testenv.StartArgoCD(t, k, k.Namespace(t, "argocd-run-api"))
	nats := testenv.StartNATS(t)
	health, metrics := testenv.FreeAddr(t), testenv.FreeAddr(t)
	envMap := map[string]string{
		"NATS_URL": nats.URL(), "KUBECONFIG": k.Kubeconfig, "HEALTH_ADDR": health, "METRICS_ADDR": metrics,
		"ARGO_URL": argocd.URL, "ARGO_USERNAME": testenv.ArgoCDAdmin, "ARGO_PASSWORD": "wrong",
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs testenv.SyncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, func(k string) string { return envMap[k] }, &logs, &logs) }()

	want := "log in to Argo CD at " + argocd.URL + " as admin (ARGO_USERNAME, ARGO_PASSWORD): refused"
	var body string
	eventually(t, "/readyz names the refused log-in", func() bool {
		resp, err := http.Get("http://" + health + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		body = b.String()
		return resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(body, want)
	})
	if !strings.Contains(logs.String(), "Argo CD API not usable") || !strings.Contains(logs.String(), "refused") {
		t.Errorf("the start does not log the refused log-in:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), `"wrong"`) || strings.Contains(body, "wrong") {
		t.Error("the password is in the logs or /readyz")
	}
	cancel()
	select {
	case err := <-done:
		t.Logf("run returned %v", err) // the caches never synced: the start was aborted
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return within 15s of cancel")
	}
}
