package testenv

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// argoCDReadyTimeout bounds the start of argocd-server, until /healthz answers: it syncs
	// its informers first, which takes a few seconds on a loaded two-core machine.
	argoCDReadyTimeout = 60 * time.Second
	// redisReadyTimeout bounds the start of redis-server, until it answers PING.
	redisReadyTimeout = 10 * time.Second
	// ArgoCDAdmin is the user StartArgoCD's server knows: Argo CD's built-in local admin, who
	// holds the role:admin policy.
	ArgoCDAdmin = "admin"
)

// ArgoCD is a running argocd-server (Argo CD's API server, from the module version
// services/argo-syncer pins) with its own redis-server, started by StartArgoCD. It reads and
// writes Argo CD's resources (Applications, AppProjects, cluster Secrets) in Namespace of the
// Kube it was given; register that API server as a cluster by its URL (Kube.Config.Host) and
// client certificate to deploy to it. No application controller, repo server or Dex runs: the API serves logins and the CRUD of clusters,
// projects and Applications, while anything that asks the repo server (an Application create
// or update with validation, manifests, sync) fails after a connection error.
type ArgoCD struct {
	// Addr is the API's host:port on 127.0.0.1, for apiclient.ClientOptions.ServerAddr. gRPC and
	// HTTP share the port, in plain text (the server runs with --insecure): set PlainText.
	Addr string
	// URL is the API's base URL, http://Addr (POST URL+"/api/v1/session" logs in).
	URL string
	// Namespace is where the server keeps its settings (argocd-cm, argocd-secret,
	// argocd-rbac-cm), the cluster and repository Secrets, AppProjects and Applications.
	Namespace string
	// Password is ArgoCDAdmin's password, random for each server.
	Password string
	// RedisAddr is the host:port of the server's redis-server (its cache: sessions' failed
	// logins, cluster info, app state).
	RedisAddr string
}

// StartArgoCD starts a redis-server (Debian's package, from PATH; hack/test-deps.sh installs
// it) and an argocd-server (built by hack/build-tools.sh --with argocd-server on first use) on
// free ports of 127.0.0.1, against kube. It installs Argo CD's CRDs into kube, creates
// namespace and in it the settings the server needs: argocd-cm, argocd-rbac-cm and
// argocd-secret with a random admin password (bcrypt, as `argocd admin initial-password`
// would find it) and server signing key. It returns once /healthz answers, and stops both
// processes when the test ends; their output goes to the test log if it failed. Redis keeps
// nothing on disk.
//
// Servers sharing one Kube need distinct namespaces. StartArgoCD fails the test when namespace
// is not a valid namespace name, kube is nil, a binary is missing or cannot be built, or a server does not
// become ready within a minute (redis-server: 10 seconds).
func StartArgoCD(t testing.TB, kube *Kube, namespace string) *ArgoCD {
	t.Helper()
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		t.Fatalf("start Argo CD: namespace %q: %s", namespace, strings.Join(errs, "; "))
	}
	if kube == nil {
		t.Fatal("start Argo CD: no Kube given: argocd-server needs an API server for its settings and resources")
	}
	redisBin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("start Argo CD: %v: install Debian's redis-server (hack/test-deps.sh does)", err)
	}
	argoBin, err := ArgoCDServerBinary()
	if err != nil {
		t.Fatalf("start Argo CD: %v", err)
	}
	kube.InstallCRDs(t, ArgoCDCRDs()...)
	kube.Namespace(t, namespace)
	password := randomHex(t, 12)
	createArgoCDSettings(t, kube.Client, namespace, password)

	redisAddr := startRedis(t, redisBin)
	addr, metricsAddr := FreeAddr(t), FreeAddr(t)
	_, port := splitPort(addr)
	_, metricsPort := splitPort(metricsAddr)
	out := &SyncBuffer{}
	cmd := exec.Command(argoBin,
		"--kubeconfig", kube.Kubeconfig, "--namespace", namespace,
		"--insecure", "--address", "127.0.0.1", "--port", port,
		"--metrics-address", "127.0.0.1", "--metrics-port", metricsPort,
		"--redis", redisAddr,
		// Nothing listens there: the repo server and Dex are only dialled when a request needs them.
		"--repo-server", FreeAddr(t), "--repo-server-plaintext",
		"--dex-server", "http://"+FreeAddr(t), "--dex-server-plaintext",
		// The UI is not in the binary (the module's ui/dist/app holds a placeholder only); an
		// empty directory instead of the image's /shared/app keeps the host's files out.
		"--staticassets", t.TempDir(),
		"--loglevel", "info")
	cmd.Stdout, cmd.Stderr = out, out
	exited := startProcess(t, "argocd-server", cmd, out)

	a := &ArgoCD{Addr: addr, URL: "http://" + addr, Namespace: namespace, Password: password, RedisAddr: redisAddr}
	waitReady(t, "argocd-server", argoCDReadyTimeout, exited, out, func() error {
		return a.healthy(context.Background())
	})
	return a
}

// ArgoCDServerBinary returns the path of the argocd-server binary (the argo-cd/v2 version
// pinned in tools/argocd-server). It runs hack/build-tools.sh --with argocd-server, which
// builds the binary on first use (about 3 minutes on two cores) and links it as
// <tools cache>/argocd-server. It fails when the script fails or the binary is missing.
func ArgoCDServerBinary() (string, error) {
	assets, err := buildToolsWithArgoCD()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(filepath.Dir(assets), "argocd-server")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("find argocd-server binary: %w", err)
	}
	return bin, nil
}

// healthy asks the server's /healthz?full=true, which also lists the clusters from the
// settings it loaded.
func (a *ArgoCD) healthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+"/healthz?full=true", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /healthz: %s", resp.Status)
	}
	return nil
}

// createArgoCDSettings creates the ConfigMaps and the Secret argocd-server reads its settings
// from, labelled app.kubernetes.io/part-of=argocd as its informers select them.
func createArgoCDSettings(t testing.TB, c client.Client, namespace, password string) {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatalf("start Argo CD: hash the admin password: %v", err)
	}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{
			"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "argocd",
		}}
	}
	objects := []client.Object{
		&corev1.ConfigMap{ObjectMeta: meta("argocd-cm"), Data: map[string]string{"admin.enabled": "true"}},
		// No policy beyond the built-in ones: admin holds role:admin, nobody else has a role.
		&corev1.ConfigMap{ObjectMeta: meta("argocd-rbac-cm")},
		&corev1.Secret{ObjectMeta: meta("argocd-secret"), StringData: map[string]string{
			"admin.password":      string(hash),
			"admin.passwordMtime": time.Now().UTC().Format(time.RFC3339),
			"server.secretkey":    randomHex(t, 32),
		}},
	}
	for _, obj := range objects {
		if err := c.Create(context.Background(), obj); err != nil {
			t.Fatalf("start Argo CD: create %s/%s: %v", namespace, obj.GetName(), err)
		}
	}
}

// startRedis starts redis-server on a free port of 127.0.0.1 without persistence (no RDB
// snapshots, no append-only file, its working directory from t.TempDir), waits until it
// answers PING and returns its address. The process is killed when the test ends.
func startRedis(t testing.TB, bin string) string {
	t.Helper()
	addr := FreeAddr(t)
	_, port := splitPort(addr)
	out := &SyncBuffer{}
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
		"--dir", t.TempDir())
	cmd.Stdout, cmd.Stderr = out, out
	exited := startProcess(t, "redis-server", cmd, out)
	waitReady(t, "redis-server", redisReadyTimeout, exited, out, func() error { return redisPing(addr) })
	return addr
}

// redisPing sends PING in Redis's inline protocol and expects +PONG.
func redisPing(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// startProcess starts cmd, whose output goes to out, and kills it when the test ends, logging
// out if the test failed. The returned channel is closed when the process exits.
func startProcess(t testing.TB, name string, cmd *exec.Cmd, out *SyncBuffer) <-chan struct{} {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out.String())
		}
	})
	return exited
}

// waitReady calls ready every 50 ms until it returns nil, and fails the test with the
// process's output when the process exits first or timeout passes.
func waitReady(t testing.TB, name string, timeout time.Duration, exited <-chan struct{}, out *SyncBuffer, ready func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return
		}
		select {
		case <-exited:
			t.Fatalf("%s exited before it was ready (%v):\n%s", name, err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within %s: %v\n%s", name, timeout, err, out.String())
		}
		time.Sleep(pollInterval)
	}
}

// randomHex returns n random bytes, hex-encoded.
func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("random bytes: %v", err)
	}
	return hex.EncodeToString(b)
}
