package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/pkg/testenv/rancherfake"
)

// canaries are unique secrets planted in every input that holds one. None may appear in
// anything Enforcement stores, publishes, logs or serves.
var canaries = map[string]string{
	"rancher source token":          "CANARY-rancher-token-1f3a",
	"rancher url user information":  "CANARY-rancher-userinfo-2b4c",
	"malformed rancher url":         "CANARY-rancher-malformed-3c5d",
	"rancher kubeConfig field":      "CANARY-rancher-kubeconfig-4d6e",
	"rancher key field":             "CANARY-rancher-key-5e7f",
	"static source token":           "CANARY-static-token-6f80",
	"static cluster token":          "CANARY-static-cluster-7a91",
	"webhook url user information":  "CANARY-hook-userinfo-8ba2",
	"webhook query token":           "CANARY-hook-query-9cb3",
	"failing webhook query token":   "CANARY-failing-query-adc4",
	"webhook signing key":           "CANARY-signing-key-bed5",
	"Argo CD password (API mode)":   "CANARY-argocd-password-cfe6",
	"Argo CD token (API mode)":      "CANARY-argocd-token-d0f7",
	"webhook url, malformed, token": "CANARY-hook-malformed-e1a8",
}

// hookCall is what a webhook receiver saw of one call.
type hookCall struct{ auth, token, signature string }

// hookReceiver is a webhook receiver on loopback answering status to every call.
func hookReceiver(t *testing.T, status int) (*httptest.Server, func() []hookCall) {
	var mu sync.Mutex
	var calls []hookCall
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		user, pass, _ := r.BasicAuth()
		mu.Lock()
		calls = append(calls, hookCall{auth: user + ":" + pass, token: r.URL.Query().Get("token"), signature: r.Header.Get("webhook-signature")})
		mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []hookCall {
		mu.Lock()
		defer mu.Unlock()
		return append([]hookCall(nil), calls...)
	}
}

// TestCanarySecretsAreStoredNowhere plants a unique secret in every input that holds one (source
// tokens, a Rancher url's user information, Rancher cluster fields holding a kubeconfig and a
// key, webhook urls' user information and query tokens, a signing key, the Argo CD API mode's
// password and token) and runs the whole pipeline with the built services: Rancher and static
// sources, a rule with signed beforeInstall and a failing afterInstall, rules whose Rancher url
// has user information or is malformed, and a malformed event for dead letters. Then it searches
// every message of every stream (events, dead letters, every KV bucket's history), every log line
// of every service, every ClusterRule status, every service's /metrics page, every Kubernetes
// Event and the Applications and AppProjects: no canary anywhere. (Argo CD's cluster Secrets
// hold the cluster tokens by design and are not searched.) The receivers prove the full
// endpoints, credentials included, were called.
func TestCanarySecretsAreStoredNowhere(t *testing.T) {
	s := startSystem(t, map[string]string{
		"TRIGGER_ALLOWED_NETWORKS": "127.0.0.0/8,::1",
		"TRIGGER_MAX_ATTEMPTS":     "2",
		"TRIGGER_BACKOFF_BASE":     "50ms",
		"TRIGGER_BACKOFF_MAX":      "100ms",
	})
	ctx := context.Background()

	// Sources: a Rancher whose token is a canary and whose cluster objects carry credentials in
	// fields no deny-list named; Rancher Secrets whose url has user information or is malformed;
	// static clusters with canary tokens.
	rancher := rancherfake.New(t, canaries["rancher source token"], 2)
	c := rancherfake.Cluster("c-1", "prod-a", "active", nil)
	c["importedConfig"] = map[string]any{"kubeConfig": "apiVersion: v1\n# " + canaries["rancher kubeConfig field"]}
	c["key"] = canaries["rancher key field"]
	rancher.SetClusters(c)
	s.createSecret("rancher-canary", map[string][]byte{"url": []byte(rancher.URL), "token": []byte(canaries["rancher source token"]), "caCert": rancher.CACertPEM()})
	s.createSecret("rancher-userinfo", map[string][]byte{
		"url": []byte(strings.Replace(rancher.URL, "https://", "https://admin:"+canaries["rancher url user information"]+"@", 1)), "token": []byte("t"), "caCert": rancher.CACertPEM()})
	s.createSecret("rancher-malformed", map[string][]byte{"url": []byte("https://rancher.example:" + canaries["malformed rancher url"] + "/"), "token": []byte("t")})
	s.createSecret("static", map[string][]byte{"token": []byte(canaries["static source token"])})
	s.createSecret("edge-2-credentials", map[string][]byte{"token": []byte(canaries["static cluster token"])})
	s.createSecret("hook-key", map[string][]byte{"key": []byte(canaries["webhook signing key"])})

	ok, okCalls := hookReceiver(t, http.StatusOK)
	failing, failingCalls := hookReceiver(t, http.StatusInternalServerError)
	before := strings.Replace(ok.URL, "http://", "http://hook:"+canaries["webhook url user information"]+"@", 1) +
		"/before?token=" + canaries["webhook query token"]
	after := failing.URL + "/after?token=" + canaries["failing webhook query token"]
	s.applyRule(operatorNS, fmt.Sprintf(`apiVersion: enforcement.globo.com/v1beta1
kind: ClusterRule
metadata:
  name: canary
spec:
  enforcements:
    - name: guestbook
      repo: https://github.com/argoproj/argocd-example-apps
      path: helm-guestbook
      helm:
        parameters:
          clusterURL: ${{ url }}
          provider: ${{ provider }}
  source:
    secretName: rancher-canary
    rancher: {}
  triggers:
    beforeInstall:
      endpoint: %q
      signingSecret: hook-key
      failurePolicy: Fail
    afterInstall:
      endpoint: %q
`, before, after))
	for _, name := range []string{"userinfo", "malformed"} {
		s.applyRule(operatorNS, fmt.Sprintf(`apiVersion: enforcement.globo.com/v1beta1
kind: ClusterRule
metadata:
  name: %s
spec:
  enforcements:
    - name: agent
      repo: https://github.com/example/agent
  source:
    secretName: rancher-%s
    rancher: {}
`, name, name))
	}
	s.staticRule(`
- name: edge-1
  url: https://edge-1.example:6443
- name: edge-2
  url: https://edge-2.example:6443
  secretName: edge-2-credentials
`, fmt.Sprintf(`  triggers:
    afterInstall:
      endpoint: "http://127.0.0.1:%s/x"
`, canaries["webhook url, malformed, token"]))

	// The pipeline ran: the signed beforeInstall reached the full endpoint, the Applications
	// exist, the failing afterInstall failed, both broken Rancher sources are degraded.
	testenv.Eventually(t, 90*time.Second, func() error {
		if err := equal("Applications", s.names(gvrApplication), []string{"edge-1-agent", "edge-2-agent", "prod-a-guestbook"}); err != nil {
			return err
		}
		if len(failingCalls()) < 2 {
			return fmt.Errorf("the failing afterInstall was called %d times, want 2", len(failingCalls()))
		}
		failed, invalidSecrets := 0, 0
		for _, e := range s.audit() {
			switch e := e.(type) {
			case *events.TriggerFailed:
				failed++
			case *events.SourceDegraded:
				if e.Reason == events.DegradedSecretInvalid {
					invalidSecrets++
				}
			}
		}
		if failed < 3 || invalidSecrets < 2 {
			return fmt.Errorf("%d TriggerFailed (want the failing afterInstall and the two static ones), %d SourceDegraded SecretInvalid (want 2)", failed, invalidSecrets)
		}
		return nil
	})
	// A failed delivery is an outcome event, not a dead letter; dead letters come from events a
	// consumer cannot handle: a malformed one where trigger-dispatcher and argo-syncer consume.
	bad := nats.NewMsg(events.SubjectRoot + ".intent.install.canary.bad")
	bad.Data = []byte("{not json")
	if _, err := s.js.PublishMsg(ctx, bad); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		dl, err := events.ListDeadLetters(ctx, s.js, "")
		if err != nil {
			return fmt.Errorf("list dead letters: %w", err)
		}
		if len(dl) < 2 {
			return fmt.Errorf("%d dead letters, want 2", len(dl))
		}
		return nil
	})
	calls := okCalls()
	want := hookCall{auth: "hook:" + canaries["webhook url user information"], token: canaries["webhook query token"]}
	if len(calls) == 0 || calls[0].auth != want.auth || calls[0].token != want.token || calls[0].signature == "" {
		t.Errorf("beforeInstall receiver got %+v, want the rule's user information and query token, signed", calls)
	}
	if f := failingCalls(); f[0].token != canaries["failing webhook query token"] {
		t.Errorf("failing afterInstall receiver got token %q, want the rule's", f[0].token)
	}

	// The Argo CD API mode's password and token: both at once are refused, naming the variables
	// only; the password alone, with no Argo CD listening, keeps argo-syncer running, not ready,
	// and neither its output nor /readyz shows the password.
	argoSyncer := func(timeout time.Duration, env ...string) (string, string) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		health := testenv.FreeAddr(t)
		cmd := exec.CommandContext(ctx, filepath.Join(binDir, "argo-syncer"))
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "NATS_URL=" + s.nats.URL(), "KUBECONFIG=" + s.kube.Kubeconfig,
			"ARGO_URL=http://" + testenv.FreeAddr(t), "ARGO_USERNAME=admin", "ARGO_PASSWORD=" + canaries["Argo CD password (API mode)"],
			"METRICS_ADDR=" + testenv.FreeAddr(t), "HEALTH_ADDR=" + health}, env...)
		var out testenv.SyncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var readyz string
		for ctx.Err() == nil && readyz == "" {
			time.Sleep(200 * time.Millisecond)
			if resp, err := http.Get("http://" + health + "/readyz"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if strings.Contains(string(b), "argocd") {
					readyz = string(b)
				}
			}
		}
		cancel()
		_ = cmd.Wait()
		return out.String(), readyz
	}
	both, _ := argoSyncer(10*time.Second, "ARGO_TOKEN="+canaries["Argo CD token (API mode)"])
	if !strings.Contains(both, "ARGO_TOKEN and ARGO_USERNAME/ARGO_PASSWORD are both set") {
		t.Errorf("argo-syncer with a token and a password said %q, want it to refuse the two", both)
	}
	unreachable, readyz := argoSyncer(20 * time.Second)
	if !strings.Contains(readyz, "argocd") {
		t.Errorf("argo-syncer in API mode without an Argo CD: /readyz %q, want the argocd check failing", readyz)
	}

	// Everything Enforcement stores, publishes, logs or serves.
	places := map[string]string{"argo-syncer output with a token and a password": both,
		"argo-syncer output in API mode": unreachable, "argo-syncer /readyz in API mode": readyz}
	for _, name := range hubServices {
		b, err := os.ReadFile(filepath.Join(s.logs, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		places[name+" log"] = string(b)
		places[name+" /metrics"] = get(t, "http://"+s.procs[name].metrics+"/metrics")
	}
	list := func(gvr schema.GroupVersionResource, namespace string) []map[string]any {
		l, err := s.dyn.Resource(gvr).Namespace(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := make([]map[string]any, 0, len(l.Items))
		for _, i := range l.Items {
			out = append(out, i.Object)
		}
		return out
	}
	var statuses []any
	for _, r := range list(gvrClusterRule, "") {
		statuses = append(statuses, r["status"])
	}
	places["ClusterRule statuses"] = marshal(t, statuses)
	places["Kubernetes Events"] = marshal(t, list(schema.GroupVersionResource{Version: "v1", Resource: "events"}, ""))
	places["Applications"] = marshal(t, list(gvrApplication, argoNS))
	places["AppProjects"] = marshal(t, list(gvrAppProject, argoNS))
	for what, text := range places {
		if text == "" && what != "ClusterRule statuses" {
			t.Errorf("%s: nothing to search", what)
		}
	}
	if len(eventstest.Occurrences(t, s.js, "(https://redacted@127.0.0.1:")) == 0 {
		t.Error("no SourceDegraded event says, redacted, why the Rancher url with user information is refused")
	}

	t.Logf("searched %d stream messages, %d places, for %d canaries", eventstest.Messages(t, s.js), len(places), len(canaries))
	for input, canary := range canaries {
		for _, where := range eventstest.Occurrences(t, s.js, canary) {
			t.Errorf("the %s is stored in %s", input, where)
		}
		for what, text := range places {
			if i := strings.Index(text, canary); i >= 0 {
				t.Errorf("the %s is in the %s: …%s…", input, what, text[max(0, i-200):min(len(text), i+len(canary)+50)])
			}
		}
	}
}

// get returns the body of a GET.
func get(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// marshal is v as JSON.
func marshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
