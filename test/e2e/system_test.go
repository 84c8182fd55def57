package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/pkg/testenv/rancherfake"
)

// hubServices are the binaries the end-to-end tests run.
var hubServices = []string{"source-scanner", "rule-engine", "argo-syncer", "trigger-dispatcher"}

const (
	operatorNS = "enforcement"
	argoNS     = "argocd"
	token      = "token-e2e:secret"
)

var (
	binDir string
	root   string
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard()) // envtest's start-up logs through controller-runtime
	code, err := buildAndRun(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

// buildAndRun compiles every hub service once (plain go build from the repository root, as a
// user would) and runs the tests.
func buildAndRun(m *testing.M) (int, error) {
	var err error
	if root, err = testenv.RepoRoot(); err != nil {
		return 0, err
	}
	if binDir, err = os.MkdirTemp("", "e2e-bin-"); err != nil {
		return 0, err
	}
	defer os.RemoveAll(binDir)
	args := []string{"build", "-o", binDir + "/"}
	for _, s := range hubServices {
		args = append(args, "./services/"+s)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("build services: %w", err)
	}
	return m.Run(), nil
}

var (
	gvrApplication = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"}
	gvrAppProject  = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "appprojects"}
	gvrClusterRule = schema.GroupVersionResource{Group: "enforcement.globo.com", Version: "v1beta1", Resource: "clusterrules"}
)

// system is one running Enforcement: NATS, an API server, a fake Rancher and the services.
type system struct {
	t       testing.TB
	nats    *testenv.NATS        // the bus, unless cluster
	cluster *testenv.NATSCluster // the bus of startSystemOnNATSCluster
	kube    *testenv.Kube
	dyn     dynamic.Interface
	rancher *rancherfake.Server
	js      jetstream.JetStream // the test's own connection, for reading the stream
	env     map[string]string
	logs    string
	// withUsers: each service connects as its own NATS user (startSystemWithUsers).
	withUsers bool
	// profiles: each service serves its profiles at an address of its own (PPROF_ADDR, proc.pprof).
	profiles bool

	mu    sync.Mutex
	procs map[string]*proc
}

type proc struct {
	cmd     *exec.Cmd
	health  string
	metrics string
	pprof   string // PPROF_ADDR, "" unless system.profiles
	done    chan struct{}
}

// startSystem starts everything with the given overrides of the services' environment and
// waits until every service is ready.
func startSystem(t testing.TB, env map[string]string) *system {
	t.Helper()
	return newSystem(t, env, natsSingle)
}

// startSystemWithUsers is startSystem on a NATS server with the authorization the repository
// ships (deploy/nats/authorization.conf): each service connects as its own user (NATS_USER,
// NATS_PASSWORD), the test as the operator.
func startSystemWithUsers(t *testing.T, env map[string]string) *system {
	t.Helper()
	return newSystem(t, env, natsWithUsers)
}

// startSystemOnNATSCluster is startSystem on a 3-node NATS cluster (nats-server processes with
// routes), the services connected to all three nodes with STREAM_REPLICAS=3.
func startSystemOnNATSCluster(t *testing.T, env map[string]string) *system {
	t.Helper()
	return newSystem(t, env, natsCluster)
}

// natsMode is the bus a system runs on.
type natsMode int

const (
	natsSingle    natsMode = iota // one embedded server, no authorization
	natsWithUsers                 // one embedded server with the shipped authorization
	natsCluster                   // three nats-server processes, streams with three replicas
)

func newSystem(t testing.TB, env map[string]string, mode natsMode) *system {
	t.Helper()
	return newSystemWith(t, env, mode, nil)
}

// newSystemWith is newSystem that calls before, when not nil, once the servers run and before
// the services start.
func newSystemWith(t testing.TB, env map[string]string, mode natsMode, before func(*system)) *system {
	t.Helper()
	s := &system{t: t, procs: map[string]*proc{}, logs: t.TempDir(), withUsers: mode == natsWithUsers}
	var natsURL string
	switch mode {
	case natsWithUsers:
		s.nats = testenv.StartNATS(t, testenv.WithAuthorization(t, testenv.ShippedAuthorization(t)))
		const operator = "enforcement-operator"
		s.js = s.nats.JetStream(t, nats.UserInfo(operator, testenv.NATSPassword(operator)))
		natsURL = s.nats.URL()
	case natsCluster:
		s.cluster = testenv.StartNATSCluster(t, 3)
		s.js = s.cluster.JetStream(t)
		natsURL = s.cluster.URL()
	default:
		s.nats = testenv.StartNATS(t)
		s.js = s.nats.JetStream(t)
		natsURL = s.nats.URL()
	}
	crds := append(testenv.ArgoCDCRDs(), testenv.OCMCRDs()...)
	s.kube = testenv.StartKube(t, testenv.WithCRDs(append(crds, testenv.ClusterProfileCRDs()...)...))
	s.kube.InstallCRDsFromDir(t, filepath.Join(root, "deploy", "k8s", "enforcement-crds", "crds"))
	s.kube.Namespace(t, operatorNS)
	s.kube.Namespace(t, argoNS)
	var err error
	if s.dyn, err = dynamic.NewForConfig(s.kube.Config); err != nil {
		t.Fatal(err)
	}
	s.rancher = rancherfake.New(t, token, 2)
	s.createSecret("rancher", map[string][]byte{"url": []byte(s.rancher.URL), "token": []byte(token), "caCert": s.rancher.CACertPEM()})

	s.env = map[string]string{
		"NATS_URL":           natsURL,
		"KUBECONFIG":         s.kube.Kubeconfig,
		"OPERATOR_NAMESPACE": operatorNS,
		"ARGOCD_NAMESPACE":   argoNS,
		"SCAN_INTERVAL":      "1s",
		"GONE_GRACE_PERIOD":  "4s",
		"LOG_LEVEL":          "debug",
	}
	if mode == natsCluster {
		s.env["STREAM_REPLICAS"] = "3"
	}
	for k, v := range env {
		s.env[k] = v
	}
	if before != nil {
		before(s)
	}
	for _, name := range hubServices {
		s.start(name)
	}
	t.Cleanup(s.stopAll)
	return s
}

// start runs one service binary and waits until its /readyz answers 200.
func (s *system) start(name string) {
	s.t.Helper()
	s.startAs(name, name)
}

// startAs runs a further replica of the service binary, as instance (its name for kill and
// logTail, and its log file), and waits until its /readyz answers 200.
func (s *system) startAs(instance, name string) {
	s.t.Helper()
	metrics, health := testenv.FreeAddr(s.t), testenv.FreeAddr(s.t)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "METRICS_ADDR=" + metrics, "HEALTH_ADDR=" + health}
	for k, v := range s.env {
		env = append(env, k+"="+v)
	}
	if s.withUsers {
		env = append(env, "NATS_USER="+name, "NATS_PASSWORD="+testenv.NATSPassword(name))
	}
	var pprof string
	if s.profiles {
		pprof = testenv.FreeAddr(s.t)
		env = append(env, "PPROF_ADDR="+pprof)
	}
	logFile, err := os.OpenFile(filepath.Join(s.logs, instance+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, name))
	cmd.Env, cmd.Stdout, cmd.Stderr = env, logFile, logFile
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{cmd: cmd, health: health, metrics: metrics, pprof: pprof, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logFile.Close(); close(p.done) }()
	s.mu.Lock()
	s.procs[instance] = p
	s.mu.Unlock()

	// On a timeout stopAll logs the tail of the service's log.
	testenv.Eventually(s.t, 60*time.Second, func() error {
		select {
		case <-p.done:
			s.t.Fatalf("%s exited during start-up:\n%s", instance, s.logTail(instance))
		default:
		}
		resp, err := http.Get("http://" + health + "/readyz")
		if err != nil {
			return fmt.Errorf("%s not ready: %w", instance, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s not ready: /readyz answers %s", instance, resp.Status)
		}
		return nil
	})
}

// kill ends a service with SIGKILL: no drain, no goodbye, as a crash or an OOM kill.
func (s *system) kill(name string) {
	s.mu.Lock()
	p := s.procs[name]
	s.mu.Unlock()
	_ = p.cmd.Process.Kill()
	<-p.done
}

// restart stops a service with SIGTERM (its ordered stop, as a rolling update does), waits for
// it to exit and starts it again.
func (s *system) restart(name string) {
	s.t.Helper()
	s.mu.Lock()
	p := s.procs[name]
	s.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(40 * time.Second):
		s.t.Fatalf("%s did not stop within 40s of SIGTERM:\n%s", name, s.logTail(name))
	}
	s.start(name)
}

func (s *system) stopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, p := range s.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			s.t.Errorf("%s did not stop within 20s of SIGTERM", name)
		}
		if p.cmd.ProcessState != nil && !p.cmd.ProcessState.Success() && p.cmd.ProcessState.ExitCode() != -1 {
			s.t.Errorf("%s exited with %v after SIGTERM:\n%s", name, p.cmd.ProcessState, s.logTail(name))
		}
		if s.t.Failed() {
			s.t.Logf("--- %s log (tail) ---\n%s", name, s.logTail(name))
		}
	}
}

func (s *system) logTail(name string) string {
	b, _ := os.ReadFile(filepath.Join(s.logs, name+".log"))
	lines := strings.Split(string(b), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

func (s *system) createSecret(name string, data map[string][]byte) {
	s.t.Helper()
	err := s.kube.Client.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: operatorNS}, Data: data,
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// applyRule creates a ClusterRule from a manifest of the compatibility suite (or inline YAML).
func (s *system) applyRule(namespace, manifest string) *unstructured.Unstructured {
	s.t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		s.t.Fatal(err)
	}
	got, err := s.dyn.Resource(gvrClusterRule).Namespace(namespace).Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		s.t.Fatalf("create ClusterRule: %v", err)
	}
	return got
}

func (s *system) deleteRule(namespace, name string) {
	s.t.Helper()
	if err := s.dyn.Resource(gvrClusterRule).Namespace(namespace).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// names lists the names of the objects of a resource in the Argo CD namespace, sorted; for
// Secrets only cluster Secrets.
func (s *system) names(gvr schema.GroupVersionResource) []string {
	s.t.Helper()
	opts := metav1.ListOptions{}
	if gvr.Resource == "secrets" {
		opts.LabelSelector = "argocd.argoproj.io/secret-type=cluster"
	}
	list, err := s.dyn.Resource(gvr).Namespace(argoNS).List(context.Background(), opts)
	if err != nil {
		s.t.Fatal(err)
	}
	var out []string
	for _, i := range list.Items {
		if i.GetDeletionTimestamp() == nil {
			out = append(out, i.GetName())
		}
	}
	sort.Strings(out)
	return out
}

var gvrSecret = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// clusterSecretNames lists the cluster names the cluster Secrets register, sorted.
func (s *system) clusterSecretNames() []string {
	s.t.Helper()
	list, err := s.dyn.Resource(gvrSecret).Namespace(argoNS).List(context.Background(),
		metav1.ListOptions{LabelSelector: "argocd.argoproj.io/secret-type=cluster"})
	if err != nil {
		s.t.Fatal(err)
	}
	var out []string
	for _, i := range list.Items {
		if i.GetDeletionTimestamp() != nil {
			continue
		}
		name, _, _ := unstructured.NestedString(i.Object, "data", "name")
		out = append(out, decodeB64(name))
	}
	sort.Strings(out)
	return out
}

func (s *system) get(gvr schema.GroupVersionResource, name string) *unstructured.Unstructured {
	s.t.Helper()
	u, err := s.dyn.Resource(gvr).Namespace(argoNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		s.t.Fatalf("get %s %s: %v", gvr.Resource, name, err)
	}
	return u
}

// equal is nil when got equals want, else says what has which names instead.
func equal(what string, got, want []string) error {
	if strings.Join(got, ",") == strings.Join(want, ",") {
		return nil
	}
	return fmt.Errorf("%s: have %v, want %v", what, got, want)
}

// holds is nil when the Argo CD namespace has exactly these Applications, AppProjects and
// cluster Secrets (by cluster name), else names the first that differ.
func (s *system) holds(applications, appProjects, clusterSecrets []string) error {
	if err := equal("Applications", s.names(gvrApplication), applications); err != nil {
		return err
	}
	if err := equal("AppProjects", s.names(gvrAppProject), appProjects); err != nil {
		return err
	}
	return equal("cluster Secrets", s.clusterSecretNames(), clusterSecrets)
}

// audit reads every event in the stream, in stream order.
func (s *system) audit() []events.Event {
	s.t.Helper()
	return eventstest.NewReader(s.t, s.js).New(s.t)
}

var (
	getOpts          = metav1.GetOptions{}
	listBySecretType = metav1.ListOptions{LabelSelector: "argocd.argoproj.io/secret-type=cluster"}
)

func sortStrings(s []string) { sort.Strings(s) }
