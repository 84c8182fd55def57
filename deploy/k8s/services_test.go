package k8s

// The strongest check of "least privilege is enough": the real services, built from this
// repository, run with exactly the environment their charts render and as their charts'
// ServiceAccounts (impersonated), against the real API server and NATS.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// Namespaces of TestServicesRunWithChartRBAC.
const (
	svcNS      = "svc-enf"
	svcArgoNS  = "svc-argocd"
	svcTeamNS  = "svc-team"
	svcWatchNS = "svc-cluster1"
)

// serviceValues make the services quick (short intervals) and put every namespace-scoped
// permission somewhere of its own.
var serviceValues = map[string]map[string]any{
	"source-scanner":     {"config": map[string]any{"scanInterval": "1s"}},
	"rule-engine":        nil,
	"argo-syncer":        {"config": map[string]any{"argocdNamespace": svcArgoNS}},
	"trigger-dispatcher": {"rbac": map[string]any{"signingSecretNamespaces": []any{svcTeamNS}}},
	"policy-watcher":     {"config": map[string]any{"watchNamespace": svcWatchNS, "pollIntervalSec": "1", "stableDurationSec": "0"}},
}

// TestServicesRunWithChartRBAC starts all five services the way their charts configure them
// and checks that each becomes ready, does its job where that is observable without other
// services (rule-engine adds its finalizer and writes status; policy-watcher writes the
// ClusterClaim; source-scanner reads the source Secret a rule names; and, from a cluster
// appeared event, rule-engine and argo-syncer write the Application), never meets a "forbidden" answer, and
// stops cleanly on SIGTERM. It builds the five binaries, which takes a while on a cold build
// cache; -short skips it.
func TestServicesRunWithChartRBAC(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the five services")
	}
	kube := kubeWithCRDs(t)
	// NATS runs as its own process, like the five services: the race detector then watches only this test.
	bus := testenv.StartNATSProcess(t)
	for _, ns := range []string{svcNS, svcArgoNS, svcTeamNS, svcWatchNS} {
		kube.Namespace(t, ns)
	}
	bin := buildServices(t)
	ctx := context.Background()

	// The objects the services react to, created as an administrator would.
	rule := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "enforcement.globo.com/v1beta1", "kind": "ClusterRule",
		"metadata": map[string]any{"name": "dev-rules", "namespace": svcTeamNS},
		"spec": map[string]any{
			"enforcements": []any{map[string]any{"name": "guestbook", "repo": "https://github.com/argoproj/argocd-example-apps", "path": "guestbook"}},
			"source":       map[string]any{"rancher": map[string]any{"filters": map[string]any{"driver": "googleKubernetesEngine"}}},
		},
	}}
	if err := kube.Client.Create(ctx, rule); err != nil {
		t.Fatalf("create ClusterRule: %v", err)
	}
	// The rule lives outside OPERATOR_NAMESPACE: it acts within the operator's grant, which
	// rule-engine reads with the chart's grants Role.
	grant := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "enforcement.globo.com/v1beta1", "kind": "ClusterRuleGrant",
		"metadata": map[string]any{"name": "svc-team", "namespace": svcNS},
		"spec": map[string]any{
			"sourceNamespaces":      []any{svcTeamNS},
			"sources":               []any{map[string]any{"kind": "rancher"}},
			"sourceRepos":           []any{"https://github.com/argoproj/*"},
			"destinationNamespaces": []any{"*"},
		},
	}}
	if err := kube.Client.Create(ctx, grant); err != nil {
		t.Fatalf("create ClusterRuleGrant: %v", err)
	}
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "policy.open-cluster-management.io/v1", "kind": "Policy",
		"metadata": map[string]any{"name": "disable-mig", "namespace": svcWatchNS},
		"spec":     map[string]any{"disabled": false, "remediationAction": "inform", "policy-templates": []any{}},
	}}
	if err := kube.Client.Create(ctx, policy); err != nil {
		t.Fatalf("create Policy: %v", err)
	}
	policy.Object["status"] = map[string]any{"compliant": "NonCompliant"}
	if err := kube.Client.Status().Update(ctx, policy); err != nil {
		t.Fatalf("set Policy status: %v", err)
	}

	// source-scanner reports the rule's source as degraded, because the Rancher Secret does not
	// exist: "not found" proves it could ask for it, where "forbidden" would not.
	js := bus.JetStream(t)
	degraded := make(chan *nats.Msg, 64)
	if _, err := js.Conn().ChanSubscribe("enforcement.source.degraded.>", degraded); err != nil {
		t.Fatal(err)
	}

	procs := map[string]*serviceProcess{}
	for _, name := range serviceCharts {
		objs := mustRender(t, name, release{name: "svc", namespace: svcNS}, serviceValues[name])
		var user string
		for _, obj := range objs {
			if !rbacKinds[obj.GetKind()] {
				continue
			}
			if err := kube.Client.Create(ctx, obj); err != nil {
				t.Fatalf("%s: create %s %s: %v", name, obj.GetKind(), obj.GetName(), err)
			}
			if obj.GetKind() == "ServiceAccount" {
				user = "system:serviceaccount:" + obj.GetNamespace() + ":" + obj.GetName()
			}
		}
		env := envMap(t, deployment(t, objs).Spec.Template.Spec.Containers[0])
		env["METRICS_ADDR"], env["HEALTH_ADDR"] = testenv.FreeAddr(t), testenv.FreeAddr(t)
		if env["NATS_URL"] != "" {
			env["NATS_URL"] = bus.URL()
		}
		if env["STREAM_REPLICAS"] != "" { // the charts' default is 3, for a NATS cluster; this bus is one server
			env["STREAM_REPLICAS"] = "1"
		}
		env["KUBECONFIG"] = impersonatingKubeconfig(t, kube, user, svcNS)
		procs[name] = startService(t, filepath.Join(bin, name), env)
	}

	for _, name := range serviceCharts {
		procs[name].waitReady(t, 90*time.Second)
	}
	eventually(t, 30*time.Second, "rule-engine adds its finalizer and writes the rule's status", func() bool {
		var got unstructured.Unstructured
		got.SetGroupVersionKind(rule.GroupVersionKind())
		if kube.Client.Get(ctx, client.ObjectKeyFromObject(rule), &got) != nil {
			return false
		}
		conditions, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		return len(got.GetFinalizers()) > 0 && len(conditions) > 0
	})
	eventually(t, 30*time.Second, "policy-watcher writes noncompliant to its ClusterClaim", func() bool {
		var claim unstructured.Unstructured
		claim.SetAPIVersion("cluster.open-cluster-management.io/v1alpha1")
		claim.SetKind("ClusterClaim")
		if kube.Client.Get(ctx, types.NamespacedName{Name: "policy-watcher-claim"}, &claim) != nil {
			return false
		}
		value, _, _ := unstructured.NestedString(claim.Object, "spec", "value")
		return value == "noncompliant"
	})
	wantDegraded := "Secret " + svcNS + "/rancher not found"
	eventually(t, 30*time.Second, "source-scanner reports "+wantDegraded, func() bool {
		select {
		case m := <-degraded:
			return strings.Contains(string(m.Data), wantDegraded)
		default:
			return false
		}
	})

	// The whole chain, as the charts' identities: a cluster appears in the rule's source,
	// rule-engine emits an install intent and argo-syncer reads the source Secret and writes
	// the AppProject and the Application into the Argo CD namespace. The Secret's Rancher URL
	// is a closed loopback port, so the scanner's own listings fail (degraded) and publish
	// nothing that could interfere.
	source := map[string]any{"apiVersion": "v1", "kind": "Secret",
		"metadata":   map[string]any{"name": "rancher", "namespace": svcNS},
		"stringData": map[string]any{"url": "https://127.0.0.1:1", "token": "token-x"}}
	if err := kube.Client.Create(ctx, &unstructured.Unstructured{Object: source}); err != nil {
		t.Fatalf("create source Secret: %v", err)
	}
	appeared := &events.ClusterAppeared{Revision: 1, Cluster: events.Cluster{
		Source: events.SourceRef{Kind: "rancher", SecretNamespace: svcNS, SecretName: "rancher",
			ID: events.SourceID("rancher", svcNS, "rancher", map[string]string{"driver": "googleKubernetesEngine"})},
		Key: "c-prod1", Name: "prod-1", URL: "https://127.0.0.1:1/k8s/clusters/c-prod1", State: "active", Eligible: true,
		Attributes: map[string]any{"id": "c-prod1", "driver": "googleKubernetesEngine"},
	}}
	if _, err := events.NewPublisher(js, "/enforcement/chart-test").Publish(ctx, appeared); err != nil {
		t.Fatalf("publish cluster appeared: %v", err)
	}
	eventually(t, 60*time.Second, "argo-syncer writes Application prod-1-guestbook in "+svcArgoNS, func() bool {
		var app unstructured.Unstructured
		app.SetAPIVersion("argoproj.io/v1alpha1")
		app.SetKind("Application")
		return kube.Client.Get(ctx, types.NamespacedName{Namespace: svcArgoNS, Name: events.ApplicationName("prod-1", "guestbook")}, &app) == nil
	})

	for _, name := range serviceCharts {
		p := procs[name]
		if err := p.stop(30 * time.Second); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if out := p.output(); strings.Contains(strings.ToLower(out), "forbidden") {
			t.Errorf("%s was refused access with the chart's RBAC:\n%s", name, out)
		} else if t.Failed() {
			t.Logf("%s output:\n%s", name, out)
		}
	}
}

// buildServices compiles the five services from this repository into a temporary directory.
func buildServices(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	for _, name := range serviceCharts {
		args = append(args, "./services/"+name)
	}
	// The same command as cmd/enforcement's local mode, so the two share the build cache.
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = filepath.Join("..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build the services: %v\n%s", err, out)
	}
	return dir
}

// impersonatingKubeconfig writes a copy of the test server's kubeconfig that acts as user with
// the groups of a ServiceAccount in namespace.
func impersonatingKubeconfig(t *testing.T, kube *testenv.Kube, user, namespace string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kube.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = user
		a.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// serviceProcess is one running service binary.
type serviceProcess struct {
	name   string
	cmd    *exec.Cmd
	health string
	out    *testenv.SyncBuffer
	done   chan error
}

func startService(t *testing.T, path string, env map[string]string) *serviceProcess {
	t.Helper()
	p := &serviceProcess{name: filepath.Base(path), health: env["HEALTH_ADDR"], out: &testenv.SyncBuffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(path)
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p.name, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			if err := <-p.done; err == nil {
				t.Logf("%s exited cleanly before it was killed", p.name)
			}
		}
	})
	return p
}

// waitReady waits until /readyz answers 200; it fails the test if the process exits first.
func (p *serviceProcess) waitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, func() error {
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("%s exited before it was ready: %v\n%s", p.name, err, p.output())
		default:
		}
		resp, err := http.Get("http://" + p.health + "/readyz")
		if err != nil {
			return fmt.Errorf("%s not ready: %w\n%s", p.name, err, p.output())
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s not ready: /readyz answers %s\n%s", p.name, resp.Status, p.output())
		}
		return nil
	})
}

// stop sends SIGTERM, as the kubelet does, and waits for a clean exit.
func (p *serviceProcess) stop(timeout time.Duration) error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case err := <-p.done:
		if err != nil {
			return fmt.Errorf("exit after SIGTERM: %w\n%s", err, p.output())
		}
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("still running %s after SIGTERM", timeout)
	}
}

func (p *serviceProcess) output() string { return p.out.String() }

// eventually is testenv.EventuallyTrue in a subtest named what: a timeout fails the subtest
// and the test carries on, so that the services are still stopped and their output checked.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Run(what, func(t *testing.T) { testenv.EventuallyTrue(t, timeout, what, cond) })
}
