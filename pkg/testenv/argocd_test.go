package testenv_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// StartArgoCD's server answers /healthz, logs the admin in with the returned password (and
// nobody with another), keeps its settings in the given namespace, and both of its processes
// are gone once the test that started them ends.
func TestStartArgoCDServesLoginsAndStopsAtCleanup(t *testing.T) {
	kube := testenv.SharedKube(t)
	var argo *testenv.ArgoCD
	t.Run("running", func(t *testing.T) {
		argo = testenv.StartArgoCD(t, kube, "argocd-start")
		if argo.URL != "http://"+argo.Addr || !strings.HasPrefix(argo.Addr, "127.0.0.1:") {
			t.Errorf("URL %q, Addr %q: want http://127.0.0.1:<port>", argo.URL, argo.Addr)
		}
		resp, err := http.Get(argo.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET /healthz: %s", resp.Status)
		}
		if code := postSession(t, argo.URL, testenv.ArgoCDAdmin, argo.Password); code != http.StatusOK {
			t.Errorf("admin login with the returned password: %d, want 200", code)
		}
		if code := postSession(t, argo.URL, testenv.ArgoCDAdmin, argo.Password+"x"); code != http.StatusUnauthorized {
			t.Errorf("admin login with another password: %d, want 401", code)
		}
		secret := &corev1.Secret{}
		if err := kube.Client.Get(t.Context(), client.ObjectKey{Namespace: "argocd-start", Name: "argocd-secret"}, secret); err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(secret.Data["admin.password"], []byte("$2")) || bytes.Contains(secret.Data["admin.password"], []byte(argo.Password)) {
			t.Errorf("argocd-secret admin.password is not a bcrypt hash of the password")
		}
	})
	if argo == nil {
		t.FailNow()
	}
	for name, addr := range map[string]string{"argocd-server": argo.Addr, "redis-server": argo.RedisAddr} {
		if conn, err := net.Dial("tcp", addr); err == nil {
			conn.Close()
			t.Errorf("%s still accepts connections on %s after its test ended", name, addr)
		}
	}
}

// postSession posts a login to Argo CD's /api/v1/session and returns the HTTP status.
func postSession(t *testing.T, url, username, password string) int {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"username": username, "password": password})
	resp, err := http.Post(url+"/api/v1/session", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// StartArgoCD refuses a namespace name the API server would refuse, and a nil Kube, before it
// starts anything.
func TestStartArgoCDRejectsAnInvalidNamespace(t *testing.T) {
	for _, ns := range []string{"", "Argo_CD", strings.Repeat("a", 64)} {
		rec := &fatalRecorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			testenv.StartArgoCD(rec, nil, ns)
		}()
		<-done
		if !strings.Contains(rec.fatal, fmt.Sprintf("namespace %q", ns)) {
			t.Errorf("StartArgoCD(%q) failed with %q, want a message naming the namespace", ns, rec.fatal)
		}
	}
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		testenv.StartArgoCD(rec, nil, "argocd")
	}()
	<-done
	if !strings.Contains(rec.fatal, "no Kube given") {
		t.Errorf("StartArgoCD without a Kube failed with %q, want it said", rec.fatal)
	}
}

// Without redis-server on PATH, StartArgoCD says what is missing and how to install it.
func TestStartArgoCDWithoutRedisSaysHowToInstallIt(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		testenv.StartArgoCD(rec, &testenv.Kube{}, "argocd") // looks for redis-server before it uses the Kube
	}()
	<-done
	if !strings.Contains(rec.fatal, "redis-server") || !strings.Contains(rec.fatal, "hack/test-deps.sh") {
		t.Errorf("StartArgoCD without redis-server failed with %q, want it named with hack/test-deps.sh", rec.fatal)
	}
}

// fatalRecorder keeps the message of a Fatalf and ends the goroutine that called it, as
// testing.T does, without failing the test.
type fatalRecorder struct {
	testing.TB
	fatal string
}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *fatalRecorder) Fatal(args ...any) {
	r.fatal = fmt.Sprint(args...)
	runtime.Goexit()
}
