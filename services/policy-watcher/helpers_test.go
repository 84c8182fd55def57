package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// The component tests share one real kube-apiserver (with the upstream OCM CRDs) and start the
// service through run, as main does, with a map for the environment. Each test works in its own
// namespace and on its own ClusterClaim, so they can run in parallel.
func TestMain(m *testing.M) { os.Exit(testenv.RunWithSharedKube(m)) }

// crdsOnce serialises the installation of the OCM CRDs: tests running in parallel would race
// to create them.
var (
	crdsOnce      sync.Mutex
	crdsInstalled bool
	clusterSeq    atomic.Int64
)

// cluster is the shared API server seen by one test.
type cluster struct {
	t    *testing.T
	kube *testenv.Kube
	dyn  dynamic.Interface
	ns   string

	suffix string
}

// newCluster returns the shared API server with the OCM CRDs and a fresh namespace for t.
func newCluster(t *testing.T, ns string) *cluster {
	t.Helper()
	k := testenv.SharedKube(t)
	crdsOnce.Lock()
	if !crdsInstalled {
		k.InstallCRDs(t, testenv.OCMCRDs()...)
		crdsInstalled = true
	}
	crdsOnce.Unlock()
	dyn, err := dynamic.NewForConfig(k.Config)
	if err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf("-%d", clusterSeq.Add(1))
	return &cluster{t: t, kube: k, dyn: dyn, ns: k.Namespace(t, ns+suffix), suffix: suffix}
}

// name makes a cluster-scoped name (a ClusterClaim's) unique to this test run, as the
// namespace is: the API server outlives a test, and -count=N runs each test N times.
func (c *cluster) name(base string) string { return base + c.suffix }

// createPolicy creates a valid OCM Policy and sets its status.compliant ("" leaves no status).
func (c *cluster) createPolicy(name, state string) {
	c.t.Helper()
	p := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "policy.open-cluster-management.io/v1",
		"kind":       "Policy",
		"metadata":   map[string]any{"name": name, "namespace": c.ns},
		"spec":       map[string]any{"disabled": false, "remediationAction": "inform", "policy-templates": []any{}},
	}}
	if _, err := c.dyn.Resource(policiesGVR).Namespace(c.ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("create Policy %s: %v", name, err)
	}
	if state != "" {
		c.setPolicy(name, state)
	}
}

// setPolicy sets a Policy's status.compliant through the status subresource, as the OCM
// framework does; "" removes the status.
func (c *cluster) setPolicy(name, state string) {
	c.t.Helper()
	res := c.dyn.Resource(policiesGVR).Namespace(c.ns)
	p, err := res.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatalf("get Policy %s: %v", name, err)
	}
	if state == "" {
		delete(p.Object, "status")
	} else {
		p.Object["status"] = map[string]any{"compliant": state}
	}
	if _, err := res.UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		c.t.Fatalf("set Policy %s status to %q: %v", name, state, err)
	}
}

func (c *cluster) deletePolicy(name string) {
	c.t.Helper()
	if err := c.dyn.Resource(policiesGVR).Namespace(c.ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		c.t.Fatalf("delete Policy %s: %v", name, err)
	}
}

// claim reads a ClusterClaim as the test sees it; labels come back too.
func (c *cluster) claim(name string) (claimState, map[string]string) {
	c.t.Helper()
	obj, err := c.dyn.Resource(claimsGVR).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return claimState{}, nil
	}
	if err != nil {
		c.t.Fatalf("get ClusterClaim %s: %v", name, err)
	}
	return claimStateOf(obj), obj.GetLabels()
}

// createClaim creates a ClusterClaim as the original deployment.yaml does (no managed-by label).
func (c *cluster) createClaim(name, value string) {
	c.t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": claimAPIVersion, "kind": claimKind,
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"value": value},
	}}
	if _, err := c.dyn.Resource(claimsGVR).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("create ClusterClaim %s: %v", name, err)
	}
}

// editClaim sets a claim's value by hand, as a person with kubectl would.
func (c *cluster) editClaim(name, value string) {
	c.t.Helper()
	patch := fmt.Sprintf(`{"spec":{"value":%q}}`, value)
	if _, err := c.dyn.Resource(claimsGVR).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		c.t.Fatalf("edit ClusterClaim %s: %v", name, err)
	}
}

// waitClaim waits until the claim holds value and returns when it first saw it.
func (c *cluster) waitClaim(name, value string, timeout time.Duration) (claimState, time.Time) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, _ := c.claim(name)
		if got.Exists && got.Value == value {
			return got, time.Now()
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("ClusterClaim %s: value %q (exists %v) after %s, want %q", name, got.Value, got.Exists, timeout, value)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// holdClaim checks that the claim keeps value (and, with sameRV, is not written at all) for d.
func (c *cluster) holdClaim(name, value string, d time.Duration, sameRV bool) claimState {
	c.t.Helper()
	first, _ := c.claim(name)
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		got, _ := c.claim(name)
		if got.Value != value {
			c.t.Fatalf("ClusterClaim %s changed to %q, want it to stay %q", name, got.Value, value)
		}
		if sameRV && got.ResourceVersion != first.ResourceVersion {
			c.t.Fatalf("ClusterClaim %s written (resourceVersion %s -> %s) although its value was right",
				name, first.ResourceVersion, got.ResourceVersion)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return first
}

// svc is one running instance of the service.
type svc struct {
	*testenv.Service
	t *testing.T
}

// startService runs the service with env (plus free health and metrics ports, debug logs)
// until the test ends or Stop is called.
func startService(t *testing.T, env map[string]string) *svc {
	t.Helper()
	full := map[string]string{"LOG_LEVEL": "debug"}
	for k, v := range env {
		full[k] = v
	}
	return &svc{t: t, Service: testenv.StartService(t, func(ctx context.Context, getenv func(string) string, logs io.Writer) error {
		return run(ctx, getenv, logs, io.Discard)
	}, full)}
}

// metric returns the value of one sample line of /metrics ("name{labels}"), 0 when absent.
func (s *svc) metric(series string) float64 {
	s.t.Helper()
	_, body := httpGet(s.t, "http://"+s.Metrics+"/metrics")
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err != nil {
				s.t.Fatalf("metric %s: %q is not a number: %v", series, rest, err)
			}
			return v
		}
	}
	return 0
}

// waitLog waits until a log line contains text.
func (s *svc) waitLog(text string, timeout time.Duration) {
	s.t.Helper()
	testenv.EventuallyTrue(s.t, timeout, fmt.Sprintf("a log line contains %q", text), func() bool {
		return strings.Contains(s.Logs.String(), text)
	})
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// writeKubeconfig writes a copy of the test server's kubeconfig with the server address and
// the impersonated identity changed (empty: unchanged).
func writeKubeconfig(t *testing.T, k *testenv.Kube, server, impersonate string, groups ...string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(k.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		if server != "" {
			c.Server = server
		}
	}
	for _, a := range cfg.AuthInfos {
		if impersonate != "" {
			a.Impersonate = impersonate
			a.ImpersonateGroups = groups
		}
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// restartMidDebounce runs the service with env (a 4 s stable duration) on the Policy p, turns p
// compliant, stops the service halfway through the stable duration (once the debounce clock is
// on the claim), calls whileDown, and starts it again. It checks that compliant is written when
// the original streak has lasted the stable duration, not a full stable duration after the
// restart.
func (c *cluster) restartMidDebounce(claim string, env map[string]string, whileDown func()) {
	t := c.t
	t.Helper()
	const stable = 4 * time.Second
	c.createPolicy("p", "NonCompliant")
	first := startService(t, env)
	c.waitClaim(claim, events.NonCompliant, 15*time.Second)
	first.waitLog(`"msg":"Watching Policies"`, 10*time.Second)

	c.setPolicy("p", "Compliant")
	began := time.Now()
	testenv.EventuallyTrue(t, 3*time.Second, "the debounce clock is written on the claim", func() bool {
		got, _ := c.claim(claim)
		return got.HasSince
	})
	time.Sleep(2 * time.Second) // half the stable duration
	first.Stop()
	whileDown()

	restarted := time.Now()
	second := startService(t, env)
	_, at := c.waitClaim(claim, events.Compliant, stable+5*time.Second)
	second.waitLog("Restored debounce clock", time.Second)
	t.Logf("compliant written %s after the streak began, %s after the restart (stable %s)",
		at.Sub(began).Round(time.Millisecond), at.Sub(restarted).Round(time.Millisecond), stable)
	if at.Sub(began) < stable-100*time.Millisecond {
		t.Errorf("compliant written %s after the streak began, before the stable duration", at.Sub(began))
	}
	if at.Sub(restarted) > stable-time.Second {
		t.Errorf("compliant written %s after the restart: the clock started over", at.Sub(restarted))
	}
}
