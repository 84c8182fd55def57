package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// TestLocalRunProducesTheDemoApplications runs the README's run command as a new user would
// (no NATS_URL, no KUBECONFIG): it must build and start everything, narrate, produce the demo's
// Applications with their rendered parameters, and stop cleanly on cancel (Ctrl-C).
func TestLocalRunProducesTheDemoApplications(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out testenv.SyncBuffer
	errc := make(chan error, 1)
	noEnv := func(string) string { return "" } // a fresh shell: no NATS_URL, no KUBECONFIG
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	toBuild, err := missingTools(ctx, root, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	processStderr := captureStderr(t) // controller-runtime's stack trace goes to os.Stderr itself
	go func() { errc <- run(ctx, []string{"local"}, noEnv, &out, &out) }()
	defer func() {
		if t.Failed() {
			t.Logf("output of the local mode:\n%s", out.String())
		}
	}()

	want := []string{"demo-eu-1-guestbook", "demo-eu-1-helm-guestbook", "demo-us-1-guestbook", "demo-us-1-helm-guestbook"}
	created := regexp.MustCompile(`Created Application argocd/(\S+)`)
	testenv.Eventually(t, 6*time.Minute, func() error {
		select {
		case err := <-errc:
			t.Fatalf("local mode ended early: %v", err)
		default:
		}
		var got []string
		for _, m := range created.FindAllStringSubmatch(out.String(), -1) {
			got = append(got, m[1])
		}
		sort.Strings(got)
		if strings.Join(got, ",") != strings.Join(want, ",") || !strings.Contains(out.String(), "All services ready") {
			return fmt.Errorf("created %v, want %v, and all services ready", got, want)
		}
		return nil
	})
	const stackTrace = "log.SetLogger(...) was never called"
	if strings.Contains(out.String(), stackTrace) || strings.Contains(processStderr.String(), stackTrace) {
		t.Errorf("controller-runtime printed its stack trace:\n%s", processStderr.String())
	}
	if building := strings.Contains(out.String(), "Building the control plane tools"); building != (len(toBuild) > 0) {
		t.Errorf("tools to build at start %v, build notice printed %v", toBuild, building)
	}
	for _, line := range []string{"NATS ready at nats://", "Kubernetes API ready", "Discovered cluster demo-eu-1 (static, eligible)",
		"Discovered cluster demo-dev-1 (static, not eligible yet: provisioning)", "All services ready",
		"Before applying a rule edit, preview it: edit ", " explain cluster demo-eu-1 ", " events --follow --cluster demo-eu-1"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("output lacks %q", line)
		}
	}

	// The rendered parameters, read with the kubeconfig the output points to.
	m := regexp.MustCompile(`KUBECONFIG=(\S+) kubectl`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("output does not say where the kubeconfig is:\n%s", out.String())
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", m[1])
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	apps := dyn.Resource(schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"}).Namespace("argocd")
	for app, replicas := range map[string]string{"demo-eu-1-helm-guestbook": "3", "demo-us-1-helm-guestbook": "1"} {
		u, err := apps.Get(ctx, app, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ns, _, _ := unstructured.NestedString(u.Object, "spec", "destination", "namespace")
		params, _, _ := unstructured.NestedSlice(u.Object, "spec", "source", "helm", "parameters")
		got := map[string]any{}
		for _, p := range params {
			got[p.(map[string]any)["name"].(string)] = p.(map[string]any)["value"]
		}
		cluster := strings.TrimSuffix(app, "-helm-guestbook")
		if ns != cluster || got["replicaCount"] != replicas || got["clusterURL"] != "https://"+cluster+".example.com" {
			t.Errorf("%s: namespace %q, parameters %v", app, ns, got)
		}
	}

	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("local mode on Ctrl-C: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("local mode did not stop within 60s of Ctrl-C")
	}
	for _, s := range hubServices {
		if !strings.Contains(out.String(), "Stopped "+s) {
			t.Errorf("%s was not stopped cleanly:\n%s", s, out.String())
		}
	}
}

// TestWaitReadyNamesTheExitAndTheLogEnd: a service that stops before it is ready (here a shell
// that says why and exits 3) is reported with its exit status and the end of its log, so the
// user of the local mode sees the reason without opening the log.
func TestWaitReadyNamesTheExitAndTheLogEnd(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "rule-engine.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	c := &child{name: "rule-engine", healthAddr: testenv.FreeAddr(t), logPath: logPath, done: make(chan struct{})}
	c.cmd = exec.Command("sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo line $i; done; echo 'listen tcp: address already in use'; exit 3")
	c.cmd.Stdout, c.cmd.Stderr = logFile, logFile
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); close(c.done) }()

	err = waitReady(t.Context(), c)
	if err == nil {
		t.Fatal("waitReady returned nil for a service that exited")
	}
	msg := err.Error()
	for _, want := range []string{"rule-engine exited before it was ready", "exit status 3", logPath, "line 4\n", "listen tcp: address already in use"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
	if strings.Contains(msg, "line 3\n") {
		t.Errorf("error %q holds more than the log's last 10 lines", msg)
	}
}

// captureStderr points os.Stderr at a pipe for the rest of the test, copying what arrives to the
// real stderr and into the returned buffer, for output that bypasses the writers run is given.
func captureStderr(t *testing.T) *testenv.SyncBuffer {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	orig := os.Stderr
	os.Stderr = w
	var captured testenv.SyncBuffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(io.MultiWriter(&captured, orig), r)
	}()
	t.Cleanup(func() {
		os.Stderr = orig
		_ = w.Close()
		<-done
		_ = r.Close()
	})
	return &captured
}
