package containers

// system starts Enforcement as the compose file runs it (deploy/compose/compose.yaml), from the
// same images and with the same one-shot init steps, on a private network of its own:
//
//	nats            enforcement/nats-server, JetStream on a named volume (survives a restart)
//	pki, seed       enforcement/enforcement compose-init: certificates, token, kubeconfig, CRDs
//	etcd            enforcement/etcd
//	kube-apiserver  enforcement/kube-apiserver, TLS and a static token
//	rancher         the fake Rancher (./fakerancher), TLS with its own CA
//	hub services    source-scanner, rule-engine, argo-syncer, trigger-dispatcher
//
// The test reaches NATS, the API server and the fake's admin API through published ports; the
// containers reach each other by name. Every container, the network and the volumes are removed
// by t.Cleanup (Ryuk, testcontainers' reaper, is an image and cannot be pulled here).

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/go-connections/nat"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// Configuration of the hub services in the tests: short intervals so that the scenario runs in
// seconds (the compose file uses 5s and 1m).
const (
	operatorNamespace = "enforcement"
	argoCDNamespace   = "argocd"
	scanInterval      = time.Second
	gonePeriod        = 3 * time.Second
	rancherToken      = "token-containers:test"
	// serviceMemoryLimit is each hub service's container memory limit, the charts' default.
	serviceMemoryLimit = 256 << 20
)

// hubServices are the services the tests run, in start order.
var hubServices = []string{"source-scanner", "rule-engine", "argo-syncer", "trigger-dispatcher"}

// system is one running Enforcement. Its fields are set by startSystem.
type system struct {
	run      string // unique suffix of this run's network and volume names
	network  *testcontainers.DockerNetwork
	nats     *testcontainers.DockerContainer
	kube     *testcontainers.DockerContainer
	rancher  *testcontainers.DockerContainer
	services map[string]*testcontainers.DockerContainer

	kubeConfig *rest.Config
	kubeClient kubernetes.Interface
	dyn        dynamic.Interface
	adminURL   string           // the fake Rancher's admin API on the host
	rancherCA  []byte           // PEM certificate of the fake Rancher's API
	listing    []map[string]any // what the fake Rancher lists now
}

// startSystem starts every container and returns once the hub services are ready.
func startSystem(t *testing.T) *system {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := &system{run: randomSuffix(), services: map[string]*testcontainers.DockerContainer{}}
	volumes := []string{"enforcement-nats-" + s.run, "enforcement-shared-" + s.run}

	nw, err := network.New(ctx)
	if err != nil {
		t.Fatalf("create network: %v", err)
	}
	s.network = nw
	// Cleanups run last-in first-out: the volumes go after every container that used them.
	t.Cleanup(func() { removeVolumes(t, volumes) })
	testcontainers.CleanupNetwork(t, nw)

	// NATS and etcd have no dependencies; pki writes the shared volume meanwhile.
	s.nats = s.start(ctx, t, "nats", testcontainers.ContainerRequest{
		Image:        "enforcement/nats-server:dev",
		Cmd:          []string{"--jetstream", "--store_dir=/data", "--server_name=enforcement-test"},
		ExposedPorts: []string{"4222/tcp"},
		Mounts:       testcontainers.ContainerMounts{testcontainers.VolumeMount(volumes[0], "/data")},
		WaitingFor:   wait.ForLog("Server is ready").WithStartupTimeout(30 * time.Second),
	})
	s.start(ctx, t, "pki", testcontainers.ContainerRequest{
		Image:      "enforcement/enforcement:dev",
		Cmd:        []string{"compose-init", "pki"},
		Env:        map[string]string{"KUBE_API_URL": "https://kube-apiserver:6443"},
		Mounts:     testcontainers.ContainerMounts{testcontainers.VolumeMount(volumes[1], "/shared")},
		WaitingFor: wait.ForExit().WithExitTimeout(30 * time.Second),
	})
	s.start(ctx, t, "etcd", testcontainers.ContainerRequest{
		Image: "enforcement/etcd:dev",
		Cmd: []string{"--name=enforcement-test", "--data-dir=/tmp/etcd",
			"--listen-client-urls=http://0.0.0.0:2379", "--advertise-client-urls=http://etcd:2379",
			"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
			"--initial-cluster=enforcement-test=http://127.0.0.1:2380", "--unsafe-no-fsync"},
		ExposedPorts: []string{"2379/tcp"},
		WaitingFor:   wait.ForHTTP("/health").WithPort("2379/tcp").WithForcedIPv4LocalHost().WithStartupTimeout(30 * time.Second),
	})
	s.kube = s.start(ctx, t, "kube-apiserver", testcontainers.ContainerRequest{
		Image: "enforcement/kube-apiserver:dev",
		Cmd: []string{"--etcd-servers=http://etcd:2379", "--bind-address=0.0.0.0", "--secure-port=6443",
			"--tls-cert-file=/shared/apiserver.crt", "--tls-private-key-file=/shared/apiserver.key",
			"--client-ca-file=/shared/ca.crt", "--token-auth-file=/shared/tokens.csv",
			"--service-account-issuer=https://kubernetes.default.svc",
			"--service-account-key-file=/shared/sa.pub", "--service-account-signing-key-file=/shared/sa.key",
			"--service-cluster-ip-range=10.0.0.0/24", "--authorization-mode=RBAC",
			"--enable-priority-and-fairness=false"},
		ExposedPorts: []string{"6443/tcp"},
		Mounts:       testcontainers.ContainerMounts{readOnly(testcontainers.VolumeMount(volumes[1], "/shared"))},
		WaitingFor: wait.ForHTTP("/readyz").WithPort("6443/tcp").WithForcedIPv4LocalHost().
			WithTLS(true, &tls.Config{InsecureSkipVerify: true}). //nolint:gosec // only waits for the port
			WithStartupTimeout(90 * time.Second),
	})
	// seed installs the CRDs (ClusterRule, Argo CD, OCM) and the compose demo (a static source
	// and the ClusterRule enforcement/demo), which the assertions here leave aside.
	s.start(ctx, t, "seed", testcontainers.ContainerRequest{
		Image:      "enforcement/enforcement:dev",
		Cmd:        []string{"compose-init", "seed"},
		Env:        map[string]string{"KUBECONFIG": "/shared/kubeconfig", "SEED_TIMEOUT": "90s"},
		Mounts:     testcontainers.ContainerMounts{readOnly(testcontainers.VolumeMount(volumes[1], "/shared"))},
		WaitingFor: wait.ForExit().WithExitTimeout(100 * time.Second),
	})
	s.connectKube(ctx, t)

	s.rancher = s.start(ctx, t, "rancher", testcontainers.ContainerRequest{
		FromDockerfile: testcontainers.FromDockerfile{Context: fakeRancherDir, Repo: "enforcement-test/fakerancher", Tag: s.run},
		Env:            map[string]string{"TOKEN": rancherToken},
		ExposedPorts:   []string{"8080/tcp"},
		WaitingFor:     wait.ForHTTP("/ca").WithPort("8080/tcp").WithForcedIPv4LocalHost().WithStartupTimeout(30 * time.Second),
	})
	s.adminURL = endpoint(ctx, t, s.rancher, "8080/tcp", "http")
	s.rancherCA = httpGet(t, s.adminURL+"/ca")

	env := map[string]string{
		"NATS_URL":           "nats://nats:4222",
		"KUBECONFIG":         "/shared/kubeconfig",
		"OPERATOR_NAMESPACE": operatorNamespace,
		"ARGOCD_NAMESPACE":   argoCDNamespace,
		"SCAN_INTERVAL":      scanInterval.String(),
		"GONE_GRACE_PERIOD":  gonePeriod.String(),
	}
	for _, name := range hubServices {
		s.services[name] = s.start(ctx, t, name, testcontainers.ContainerRequest{
			Image:        "enforcement/" + name + ":dev",
			Env:          env,
			ExposedPorts: []string{"8080/tcp", "8081/tcp"},
			HostConfigModifier: func(hc *container.HostConfig) {
				hc.Memory, hc.MemorySwap = serviceMemoryLimit, serviceMemoryLimit
			},
			Mounts:     testcontainers.ContainerMounts{readOnly(testcontainers.VolumeMount(volumes[1], "/shared"))},
			WaitingFor: wait.ForHTTP("/readyz").WithPort("8081/tcp").WithForcedIPv4LocalHost().WithStartupTimeout(60 * time.Second),
		})
	}
	return s
}

// start creates and starts one container on the system's network under the alias name, and
// registers its removal. One-shot containers must exit 0.
func (s *system) start(ctx context.Context, t *testing.T, name string, req testcontainers.ContainerRequest) *testcontainers.DockerContainer {
	t.Helper()
	req.Name = name + "-" + s.run
	req.Networks = []string{s.network.Name}
	req.NetworkAliases = map[string][]string{s.network.Name: {name}}
	started := time.Now()
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{ContainerRequest: req, Started: true})
	if dc, ok := c.(*testcontainers.DockerContainer); ok && dc != nil {
		testcontainers.CleanupContainer(t, dc, testcontainers.StopTimeout(5*time.Second))
		// Registered after the removal, so it runs before it: the logs of a failed test.
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("=== logs of %s%s", name, logsOf(dc))
			}
		})
	}
	if err != nil {
		t.Fatalf("start %s: %v%s", name, err, logsOf(c))
	}
	dc := c.(*testcontainers.DockerContainer)
	if _, ok := req.WaitingFor.(*wait.ExitStrategy); ok {
		state, err := dc.State(ctx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if state.ExitCode != 0 {
			t.Fatalf("%s exited with %d%s", name, state.ExitCode, logsOf(dc))
		}
	}
	t.Logf("Started %s in %s", name, time.Since(started).Round(100*time.Millisecond))
	return dc
}

// connectKube builds the test's client of the API server from the shared volume's CA and token,
// addressed through the published port (the serving certificate names 127.0.0.1 and localhost).
func (s *system) connectKube(ctx context.Context, t *testing.T) {
	t.Helper()
	ca := copyFile(ctx, t, s.kube, "/shared/ca.crt")
	tokens := string(copyFile(ctx, t, s.kube, "/shared/tokens.csv"))
	token, _, _ := strings.Cut(tokens, ",")
	s.kubeConfig = &rest.Config{
		Host:            endpoint(ctx, t, s.kube, "6443/tcp", "https"),
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca},
		QPS:             100,
		Burst:           200,
	}
	var err error
	if s.kubeClient, err = kubernetes.NewForConfig(s.kubeConfig); err != nil {
		t.Fatal(err)
	}
	if s.dyn, err = dynamic.NewForConfig(s.kubeConfig); err != nil {
		t.Fatal(err)
	}
}

// connectNATS connects the test to the NATS container through its published port (which
// changes when the container restarts), once the server takes connections there: just after a
// restart the port may be published before it does. The topology is applied as the services
// apply it: it is there already, so nothing changes.
func (s *system) connectNATS(t *testing.T) jetstream.JetStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := endpoint(ctx, t, s.nats, "4222/tcp", "nats")
	testenv.Eventually(t, 30*time.Second, func() error {
		nc, err := nats.Connect(url)
		if err != nil {
			return fmt.Errorf("connect to NATS at %s: %w", url, err)
		}
		nc.Close()
		return nil
	})
	_, js := eventstest.Bus(t, url)
	return js
}

// restart stops a container (SIGTERM, then the engine's kill after 10 s) and starts it again,
// waiting for its readiness as at first start.
func restart(t *testing.T, c *testcontainers.DockerContainer, whileDown func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	timeout := 10 * time.Second
	if err := c.Stop(ctx, &timeout); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if whileDown != nil {
		whileDown()
	}
	if err := c.Start(ctx); err != nil {
		t.Fatalf("start: %v%s", err, logsOf(c))
	}
}

// setClusters replaces the fake Rancher's listing.
func (s *system) setClusters(t *testing.T, clusters ...map[string]any) {
	t.Helper()
	if clusters == nil {
		clusters = []map[string]any{}
	}
	httpPut(t, s.adminURL+"/clusters", clusters)
	s.listing = clusters
}

// failRancher makes the fake Rancher answer every listing with status (0 heals).
func (s *system) failRancher(t *testing.T, status int) {
	t.Helper()
	httpPut(t, s.adminURL+"/fail", map[string]int{"status": status})
}

// rancherRequests is how many listings the fake Rancher has answered.
func (s *system) rancherRequests(t *testing.T) int {
	t.Helper()
	var body struct {
		Requests int `json:"requests"`
	}
	if err := json.Unmarshal(httpGet(t, s.adminURL+"/requests"), &body); err != nil {
		t.Fatal(err)
	}
	return body.Requests
}

// logsOf returns the last lines of a container's output, or "" without a container.
func logsOf(c testcontainers.Container) string {
	if c == nil {
		return ""
	}
	if dc, ok := c.(*testcontainers.DockerContainer); ok && dc == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.Logs(ctx)
	if err != nil {
		return ""
	}
	defer r.Close()
	data, _ := io.ReadAll(r)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return "\n" + strings.Join(lines, "\n")
}

func readOnly(m testcontainers.ContainerMount) testcontainers.ContainerMount {
	m.ReadOnly = true
	return m
}

// removeVolumes removes the run's named volumes once no container uses them.
func removeVolumes(t *testing.T, names []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		t.Errorf("remove volumes: %v", err)
		return
	}
	defer cli.Close()
	for _, name := range names {
		if err := cli.VolumeRemove(ctx, name, true); err != nil && !strings.Contains(err.Error(), "No such volume") {
			t.Errorf("remove volume %s: %v", name, err)
		}
	}
}

// endpoint is scheme://host:port of a container port published on the host.
func endpoint(ctx context.Context, t *testing.T, c *testcontainers.DockerContainer, port, scheme string) string {
	t.Helper()
	host, err := c.Host(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if host == "localhost" {
		host = "127.0.0.1" // the serving certificates name both; IPv4 avoids a ::1 miss
	}
	p, err := c.MappedPort(ctx, nat.Port(port))
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s://%s:%s", scheme, host, p.Port())
}

func copyFile(ctx context.Context, t *testing.T, c *testcontainers.DockerContainer, path string) []byte {
	t.Helper()
	r, err := c.CopyFileFromContainer(ctx, path)
	if err != nil {
		t.Fatalf("copy %s: %v", path, err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func httpGet(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url) //nolint:noctx // a local test server
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return data
}

func httpPut(t *testing.T, url string, body any) {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPut, url, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("PUT %s: %v", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("PUT %s: %s", url, resp.Status)
	}
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
