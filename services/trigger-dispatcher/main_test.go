package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// The package's component tests share one kube-apiserver with the Argo CD CRDs installed.
func TestMain(m *testing.M) { os.Exit(testenv.RunWithSharedKube(m)) }

// kubeWithArgoCD returns the shared API server with Argo CD's CRDs and the argocd namespace.
// The CRDs are installed once per process: installing the 1 MB ApplicationSet CRD again costs
// seconds per test.
func kubeWithArgoCD(t testing.TB) *testenv.Kube {
	t.Helper()
	kube := testenv.SharedKube(t)
	crdOnce.Do(func() {
		kube.InstallCRDs(t, testenv.ArgoCDCRDs()...)
		kube.InstallCRDsFromDir(t, filepath.Join("..", "..", "deploy", "k8s", "enforcement-crds", "crds"))
		kube.Namespace(t, "argocd")
	})
	return kube
}

var crdOnce sync.Once

// instance is one running instance of the dispatcher, started through run as main does.
type instance struct {
	health, metrics string
	logs            *testenv.SyncBuffer
	cancel          context.CancelFunc
	done            chan error
}

// startService runs the dispatcher with env (plus free HEALTH_ADDR and METRICS_ADDR) and waits
// until /readyz answers 200. The instance is stopped at the end of the test if still running.
func startService(t testing.TB, env map[string]string) *instance {
	t.Helper()
	s := &instance{health: testenv.FreeAddr(t), metrics: testenv.FreeAddr(t), logs: &testenv.SyncBuffer{}, done: make(chan error, 1)}
	full := map[string]string{"HEALTH_ADDR": s.health, "METRICS_ADDR": s.metrics}
	for k, v := range env {
		full[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { s.done <- run(ctx, func(k string) string { return full[k] }, s.logs, s.logs) }()
	t.Cleanup(func() { s.stop(t) })
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + s.health + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case err := <-s.done:
			t.Fatalf("run returned before ready: %v\nlogs:\n%s", err, s.logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 200 within 20s (last error %v)\nlogs:\n%s", err, s.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop cancels the instance and checks that run returns nil promptly. Calling it twice is fine.
func (s *instance) stop(t testing.TB) {
	t.Helper()
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("run returned %v after cancel\nlogs:\n%s", err, s.logs)
		}
	case <-time.After(15 * time.Second):
		t.Errorf("run did not return within 15s of cancel\nlogs:\n%s", s.logs)
	}
}

// baseEnv is the environment of a dispatcher talking to nats and kube, with short intervals.
func baseEnv(natsURL, kubeconfig string) map[string]string {
	return map[string]string{
		"NATS_URL":                       natsURL,
		"KUBECONFIG":                     kubeconfig,
		"TRIGGER_BACKOFF_BASE":           "20ms",
		"TRIGGER_BACKOFF_MAX":            "200ms",
		"TRIGGER_BLOCKED_RETRY_INTERVAL": "0",
		"CONSUMER_BACKOFF_BASE":          "50ms",
		// The receivers are httptest servers on loopback, which the egress policy denies.
		"TRIGGER_ALLOWED_NETWORKS": "127.0.0.0/8,::1",
	}
}

// The service becomes ready once NATS, the consumer and Kubernetes are up, serves its metrics,
// and returns nil promptly when its context is cancelled.
func TestRunReadinessAndShutdown(t *testing.T) {
	kube := kubeWithArgoCD(t)
	nats := testenv.StartNATS(t)
	s := startService(t, baseEnv(nats.URL(), kube.Kubeconfig))

	resp, err := http.Get("http://" + s.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if !strings.Contains(body.String(), "enforcement_trigger_dispatcher_") {
		t.Errorf("/metrics has no enforcement_trigger_dispatcher_ metric:\n%.2000s", body.String())
	}

	start := time.Now()
	s.stop(t)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("shutdown took %s, want under 5s", d)
	}
	if resp, err := http.Get("http://" + s.health + "/healthz"); err == nil {
		resp.Body.Close()
		t.Error("health server still answers after shutdown")
	}
}

// /readyz says not ready, naming NATS, while NATS is unreachable at start; run still returns nil
// when cancelled during that wait.
func TestRunNotReadyWithoutNATS(t *testing.T) {
	kube := kubeWithArgoCD(t)
	health, metrics := testenv.FreeAddr(t), testenv.FreeAddr(t)
	env := baseEnv("nats://"+testenv.FreeAddr(t), kube.Kubeconfig)
	env["HEALTH_ADDR"], env["METRICS_ADDR"] = health, metrics
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logs := &testenv.SyncBuffer{}
	go func() { done <- run(ctx, func(k string) string { return env[k] }, logs, logs) }()

	var status int
	var body string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + health + "/readyz")
		if err != nil {
			continue
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		status, body = resp.StatusCode, b.String()
		break
	}
	if status != http.StatusServiceUnavailable || !strings.Contains(body, "consumer") {
		t.Errorf("/readyz = %d %q, want 503 naming the consumer", status, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run returned %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return within 10s of cancel")
	}
}

// Invalid configuration fails at start with an error naming the variable.
func TestRunInvalidConfig(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"TRIGGER_MAX_ATTEMPTS":     {"TRIGGER_MAX_ATTEMPTS": "0"},
		"TRIGGER_DEFAULT_TIMEOUT":  {"TRIGGER_DEFAULT_TIMEOUT": "soon"},
		"TRIGGER_MAX_TIMEOUT":      {"TRIGGER_MAX_TIMEOUT": "301s"},
		"TRIGGER_MAX_TIMEOUT=5s":   {"TRIGGER_DEFAULT_TIMEOUT": "10s", "TRIGGER_MAX_TIMEOUT": "5s"},
		"TRIGGER_DENIED_NETWORKS":  {"TRIGGER_DENIED_NETWORKS": "10.0.0.0/33"},
		"TRIGGER_ALLOWED_NETWORKS": {"TRIGGER_ALLOWED_NETWORKS": "example.com"},
		"TRIGGER_BACKOFF_MAX":      {"TRIGGER_BACKOFF_BASE": "2s", "TRIGGER_BACKOFF_MAX": "1s"},
	} {
		t.Run(name, func(t *testing.T) {
			err := run(context.Background(), func(k string) string { return env[k] }, &testenv.SyncBuffer{}, &testenv.SyncBuffer{})
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("run = %v, want an error naming %s", err, name)
			}
		})
	}
}
