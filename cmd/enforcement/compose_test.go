package main

// The compose check (hack/compose-check.sh, make compose-check): it brings the compose demo up
// from the images `make images` built, waits until the demo's Applications exist in the
// containerised Kubernetes API, takes it down with its volumes and proves nothing is left. It
// needs a Docker engine and docker-compose, so it runs under CI=true (where a skip would be a
// failure) or ENFORCEMENT_COMPOSE_CHECK=1, and builds the images first unless SKIP_IMAGES=1;
// `go test` elsewhere skips it.
//
// It talks to the API server the way a developer does: through its published port, with the
// kubeconfig that the pki step wrote for the host (copied out of the shared volume).

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// composeImages are the images deploy/compose/compose.yaml runs, as hack/images.sh names them.
var composeImages = []string{"source-scanner", "rule-engine", "argo-syncer", "trigger-dispatcher", "enforcement", "nats-server", "etcd", "kube-apiserver"}

// composeProject isolates the check from a compose demo a developer may be running.
const composeProject = "enforcement-check"

// composeBudget bounds the wait for the demo's Applications (the issue asks for one minute on
// this machine; the budget leaves room for a busy CI host and reports the measured time).
const composeBudget = 3 * time.Minute

// demoApplications are the Applications the demo's rule yields: its two enforcements on the two
// eligible production clusters (demo-dev-1 is still provisioning, so it gets none).
func demoApplications() []string {
	var names []string
	for _, cluster := range []string{"demo-eu-1", "demo-us-1"} {
		for _, enforcement := range []string{"guestbook", "helm-guestbook"} {
			names = append(names, events.ApplicationName(cluster, enforcement))
		}
	}
	sort.Strings(names)
	return names
}

func TestCompose(t *testing.T) {
	inCI := os.Getenv("CI") != "" && os.Getenv("CI") != "false"
	if !inCI && os.Getenv("ENFORCEMENT_COMPOSE_CHECK") != "1" {
		t.Skip("needs Docker and docker-compose: run make compose-check (under CI=true it always runs)")
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("SKIP_IMAGES") != "1" {
		buildStart := time.Now()
		cmd := exec.Command(filepath.Join(root, "hack", "images.sh"), composeImages...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hack/images.sh: %v\n%s", err, out)
		}
		t.Logf("images built in %s", since(buildStart))
	}
	env := append(os.Environ(),
		"NATS_PORT="+freePort(t), "NATS_MONITOR_PORT="+freePort(t), "KUBE_API_PORT="+freePort(t))
	compose := func(args ...string) (string, error) {
		args = append([]string{"-p", composeProject, "-f", filepath.Join(root, "deploy", "compose", "compose.yaml")}, args...)
		cmd := exec.Command("docker-compose", args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("docker-compose %s: %w\n%s", strings.Join(args[4:], " "), err, out)
		}
		return string(out), nil
	}
	down := func() {
		if _, err := compose("down", "--volumes", "--remove-orphans", "--timeout", "20"); err != nil {
			t.Error(err)
		}
	}
	down() // the leftovers of an interrupted earlier run
	tornDown := false
	t.Cleanup(func() {
		if !tornDown {
			down()
		}
	})

	start := time.Now()
	if _, err := compose("up", "--detach"); err != nil {
		t.Fatal(err)
	}
	t.Logf("docker-compose up --detach returned after %s", since(start))

	ctrllog.SetLogger(logr.Discard())
	p := &composeProbe{t: t, compose: compose, dir: t.TempDir(), reached: map[string]time.Duration{}}
	ctx, cancel := context.WithTimeout(context.Background(), composeBudget)
	defer cancel()
	milestones := []struct {
		name  string
		check func(context.Context) error
	}{
		{"kubeconfig written", p.kubeconfig},
		{"Kubernetes API ready", p.apiReady},
		{"CRDs installed", p.crdsInstalled},
		{"demo seeded", p.demoSeeded},
		{"services ready", p.servicesReady},
		{"Applications created", p.applications},
	}
	deadline, _ := ctx.Deadline()
	failed := true // until every milestone is reached: then the logs are left out
	t.Cleanup(func() {
		if failed {
			p.dumpLogs()
		}
	})
	for _, m := range milestones {
		testenv.Eventually(t, time.Until(deadline), func() error {
			if err := m.check(ctx); err != nil {
				return fmt.Errorf("%s (budget %s): %w", m.name, composeBudget, err)
			}
			return nil
		})
		p.reached[m.name] = since(start)
		t.Logf("%-22s after %s", m.name, p.reached[m.name])
	}
	failed = false

	tornDown = true
	downStart := time.Now()
	down()
	t.Logf("docker-compose down --volumes took %s", since(downStart))
	for _, kind := range []string{"container", "volume", "network"} {
		args := []string{kind, "ls", "--quiet", "--filter", "label=com.docker.compose.project=" + composeProject}
		if kind == "container" {
			args = append(args, "--all")
		}
		out, err := exec.Command("docker", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if left := strings.TrimSpace(string(out)); left != "" {
			t.Errorf("%ss left after down --volumes: %s", kind, strings.Join(strings.Fields(left), " "))
		}
	}
}

// composeProbe checks the milestones of the demo's start, each a function that is nil once reached.
type composeProbe struct {
	t       *testing.T
	compose func(args ...string) (string, error)
	dir     string
	client  client.Client
	reached map[string]time.Duration
}

// kubeconfig copies the host kubeconfig out of the shared volume (through the finished pki
// container) and builds a client from it.
func (p *composeProbe) kubeconfig(context.Context) error {
	id, err := p.compose("ps", "--quiet", "pki")
	if err != nil {
		return err
	}
	if id = strings.TrimSpace(id); id == "" {
		return fmt.Errorf("no pki container yet")
	}
	path := filepath.Join(p.dir, hostKubeconfig)
	if out, err := exec.Command("docker", "cp", id+":/shared/"+hostKubeconfig, path).CombinedOutput(); err != nil {
		return fmt.Errorf("docker cp: %w: %s", err, out)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return err
	}
	cfg.Timeout = 5 * time.Second
	p.client, err = client.New(cfg, client.Options{})
	return err
}

func (p *composeProbe) apiReady(ctx context.Context) error {
	var nss corev1.NamespaceList
	return p.client.List(ctx, &nss)
}

func (p *composeProbe) crdsInstalled(ctx context.Context) error {
	for _, gvk := range []schema.GroupVersionKind{
		{Group: "enforcement.globo.com", Version: "v1beta1", Kind: "ClusterRuleList"},
		{Group: "argoproj.io", Version: "v1alpha1", Kind: "ApplicationList"},
		{Group: "argoproj.io", Version: "v1alpha1", Kind: "AppProjectList"},
		{Group: "cluster.open-cluster-management.io", Version: "v1alpha1", Kind: "ClusterClaimList"},
	} {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk)
		if err := p.client.List(ctx, list); err != nil {
			return fmt.Errorf("list %s: %w", gvk.Kind, err)
		}
	}
	return nil
}

func (p *composeProbe) demoSeeded(ctx context.Context) error {
	var cm corev1.ConfigMap
	if err := p.client.Get(ctx, client.ObjectKey{Namespace: localOperatorNamespace, Name: staticConfigMap}, &cm); err != nil {
		return err
	}
	var secret corev1.Secret
	if err := p.client.Get(ctx, client.ObjectKey{Namespace: localOperatorNamespace, Name: demoSecret}, &secret); err != nil {
		return err
	}
	rule := &unstructured.Unstructured{}
	rule.SetGroupVersionKind(schema.GroupVersionKind{Group: "enforcement.globo.com", Version: "v1beta1", Kind: "ClusterRule"})
	return p.client.Get(ctx, client.ObjectKey{Namespace: localOperatorNamespace, Name: "demo"}, rule)
}

// servicesReady asks each hub service's /readyz through its published health port.
func (p *composeProbe) servicesReady(ctx context.Context) error {
	var notReady []string
	for _, name := range hubServices {
		out, err := p.compose("port", name, "8081")
		addr := strings.TrimSpace(out)
		if err != nil || addr == "" || strings.HasSuffix(addr, ":0") {
			notReady = append(notReady, name+" (no health port: not running)")
			continue
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			notReady = append(notReady, name+" ("+err.Error()+")")
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			notReady = append(notReady, fmt.Sprintf("%s (/readyz %d)", name, resp.StatusCode))
		}
	}
	if len(notReady) > 0 {
		return fmt.Errorf("not ready: %s", strings.Join(notReady, ", "))
	}
	return nil
}

func (p *composeProbe) applications(ctx context.Context) error {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "ApplicationList"})
	if err := p.client.List(ctx, list, client.InNamespace(localArgoCDNamespace)); err != nil {
		return err
	}
	have := map[string]bool{}
	for _, app := range list.Items {
		have[app.GetName()] = true
	}
	var missing []string
	for _, name := range demoApplications() {
		if !have[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing Applications %s/{%s} (have %d)", localArgoCDNamespace, strings.Join(missing, ","), len(list.Items))
	}
	return nil
}

// dumpLogs shows the state of every container and the end of each log, for a failed check.
func (p *composeProbe) dumpLogs() {
	if out, err := p.compose("ps", "--all"); err == nil {
		p.t.Logf("docker-compose ps:\n%s", out)
	} else if out, err := p.compose("ps"); err == nil {
		p.t.Logf("docker-compose ps:\n%s", out)
	}
	// The servers' own logs are long and rarely the cause; the steps and services are.
	args := append([]string{"logs", "--no-color", "--tail", "40", "pki", "seed", "narrator"}, hubServices...)
	out, _ := p.compose(args...)
	p.t.Logf("docker-compose logs (last 40 lines each):\n%s", out)
}

// freePort is the port of testenv.FreeAddr, for the compose file's published ports.
func freePort(t *testing.T) string {
	_, port, _ := net.SplitHostPort(testenv.FreeAddr(t))
	return port
}

func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }
