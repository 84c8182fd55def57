package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// The end-to-end tests of two replicas per hub service (leader election, pkg/service Lead).

// leaderElectionEnv runs every service with leader election, at the default timings.
var leaderElectionEnv = map[string]string{
	"LEADER_ELECTION":           "true",
	"LEADER_ELECTION_NAMESPACE": operatorNS,
	// The webhook receiver listens on loopback, which trigger-dispatcher refuses unless opened.
	"TRIGGER_ALLOWED_NETWORKS": "127.0.0.0/8",
}

// deliveryCounter counts webhook calls per cluster and phase, and the distinct delivery ids.
type deliveryCounter struct {
	*httptest.Server
	mu         sync.Mutex
	calls      map[string]int             // "<cluster>/<phase>" → calls
	deliveries map[string]map[string]bool // "<cluster>/<phase>" → delivery ids
}

func newDeliveryCounter(t *testing.T) *deliveryCounter {
	h := &deliveryCounter{calls: map[string]int{}, deliveries: map[string]map[string]bool{}}
	h.Server = httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		var body struct {
			Cluster struct {
				Name string `json:"name"`
			} `json:"cluster"`
			Phase      string `json:"phase"`
			DeliveryID string `json:"deliveryId"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Errorf("webhook body: %v", err)
			return
		}
		key := body.Cluster.Name + "/" + body.Phase
		h.mu.Lock()
		defer h.mu.Unlock()
		h.calls[key]++
		if h.deliveries[key] == nil {
			h.deliveries[key] = map[string]bool{}
		}
		h.deliveries[key][body.DeliveryID] = true
	}))
	t.Cleanup(h.Close)
	return h
}

// staticClusters is the clusters.yaml of n static clusters edge-1 … edge-n.
func staticClusters(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "- name: edge-%d\n  url: https://edge-%d.example:6443\n", i, i)
	}
	return b.String()
}

// setStaticClusters replaces the static source's cluster list.
func (s *system) setStaticClusters(n int) {
	s.t.Helper()
	ctx := context.Background()
	var cm corev1.ConfigMap
	key := types.NamespacedName{Namespace: operatorNS, Name: "enforcement-static-clusters"}
	if err := s.kube.Client.Get(ctx, key, &cm); err != nil {
		s.t.Fatal(err)
	}
	cm.Data["clusters.yaml"] = staticClusters(n)
	if err := s.kube.Client.Update(ctx, &cm); err != nil {
		s.t.Fatal(err)
	}
}

// agentApps are the Applications of the rule "edge" on clusters 1 … n, sorted.
func agentApps(n int) []string {
	out := make([]string, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, fmt.Sprintf("edge-%d-agent", i))
	}
	sort.Strings(out)
	return out
}

// waitLeading waits until instance's log says it leads and returns when it first saw that
// (polled every 50 ms).
func (s *system) waitLeading(instance string, timeout time.Duration) time.Time {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(filepath.Join(s.logs, instance+".log"))
		if strings.Contains(string(b), `"msg":"Leading"`) {
			return time.Now()
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("%s did not lead within %s:\n%s", instance, timeout, s.logTail(instance))
	return time.Time{}
}

// applicationUIDs maps every Application in the Argo CD namespace to its UID.
func (s *system) applicationUIDs() map[string]types.UID {
	s.t.Helper()
	list, err := s.dyn.Resource(gvrApplication).Namespace(argoNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[string]types.UID{}
	for _, i := range list.Items {
		out[i.GetName()] = i.GetUID()
	}
	return out
}

// TestKillingTheLeaderHandsOver runs two replicas of every hub service. While clusters keep
// appearing, the leader of each service in turn is killed with SIGKILL: the standby takes over
// within 20 seconds (measured from the kill to its "Leading" log line, and printed), and at the
// end every Application exists once with the UID it was created with, every event is stored
// once, every Application was created once, every webhook was delivered with one delivery id
// per cluster and phase, and nothing was dead-lettered.
func TestKillingTheLeaderHandsOver(t *testing.T) {
	s := startSystem(t, leaderElectionEnv)
	for _, name := range hubServices {
		s.startAs(name+"-standby", name) // ready, but standby: the first instance leads
	}
	hooks := newDeliveryCounter(t)
	s.createSecret("static", map[string][]byte{"token": []byte("static-token")})
	clusters := 5
	s.staticRule(staticClusters(clusters), fmt.Sprintf(`  triggers:
    beforeInstall:
      endpoint: %[1]s/before
    afterInstall:
      endpoint: %[1]s/after
`, hooks.URL))
	testenv.Eventually(t, 90*time.Second, func() error { return equal("Applications", s.names(gvrApplication), agentApps(clusters)) })
	uids := s.applicationUIDs()

	const batch, batches = 3, 4
	for _, name := range hubServices {
		// Clusters keep appearing while the leader dies: one batch before the kill, the rest
		// during the handover.
		clusters += batch
		s.setStaticClusters(clusters)
		time.Sleep(300 * time.Millisecond)
		s.kill(name)
		killed := time.Now()
		for range batches - 1 {
			time.Sleep(time.Second)
			clusters += batch
			s.setStaticClusters(clusters)
		}
		handover := s.waitLeading(name+"-standby", 60*time.Second).Sub(killed)
		want := agentApps(clusters)
		testenv.Eventually(t, 120*time.Second, func() error {
			return equal("Applications after killing the "+name+" leader", s.names(gvrApplication), want)
		})
		converged := time.Since(killed)
		t.Logf("%s: leader killed (SIGKILL), standby leading after %s, all %d Applications after %s",
			name, handover.Round(100*time.Millisecond), clusters, converged.Round(100*time.Millisecond))
		fmt.Printf("handover %-18s %5.1f s after SIGKILL (default lease 10s, retry 2s), all Applications after %5.1f s\n",
			name, handover.Seconds(), converged.Seconds())
		if handover > 20*time.Second {
			t.Errorf("%s: handover took %s, want within 20s", name, handover)
		}
		for app, uid := range s.applicationUIDs() {
			if old, ok := uids[app]; ok && old != uid {
				t.Errorf("Application %s was deleted and recreated (UID %s, then %s)", app, old, uid)
			}
			uids[app] = uid
		}
	}

	checkNoDuplicates(t, s)
	testenv.Eventually(t, 60*time.Second, func() error {
		hooks.mu.Lock()
		defer hooks.mu.Unlock()
		for i := 1; i <= clusters; i++ {
			for _, phase := range []string{"beforeInstall", "afterInstall"} {
				key := fmt.Sprintf("edge-%d/%s", i, phase)
				if len(hooks.deliveries[key]) != 1 {
					return fmt.Errorf("%s: %d delivery ids (%d calls), want 1", key, len(hooks.deliveries[key]), hooks.calls[key])
				}
			}
		}
		return nil
	})
	repeats := 0
	hooks.mu.Lock()
	for _, n := range hooks.calls {
		repeats += n - 1
	}
	hooks.mu.Unlock()
	dead, err := events.ListDeadLetters(context.Background(), s.js, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dead {
		t.Errorf("dead letter: %+v", d)
	}
	fmt.Printf("replicas: %d clusters, %d Applications, %d webhook repeats (same delivery id), %d dead letters\n",
		clusters, len(uids), repeats, len(dead))
}

// TestStandbyWritesNothing: while another holder has every service's Lease, the four hub
// services (started with leader election) are ready but scan, consume, publish and write
// nothing; once the Leases are free they take over and the rule is installed.
func TestStandbyWritesNothing(t *testing.T) {
	s := newSystemHeld(t)
	s.createSecret("static", map[string][]byte{"token": []byte("static-token")})
	s.staticRule(staticClusters(3))
	time.Sleep(5 * time.Second) // five scan intervals: a leader would have installed everything by now

	if got := s.audit(); len(got) != 0 {
		t.Errorf("standby replicas published %d events, first %s", len(got), got[0].Type())
	}
	if err := s.holds(nil, nil, nil); err != nil {
		t.Errorf("standby replicas wrote to the Argo CD namespace: %v", err)
	}
	rule, err := s.dyn.Resource(gvrClusterRule).Namespace(operatorNS).Get(context.Background(), "edge", getOpts)
	if err != nil {
		t.Fatal(err)
	}
	if len(rule.GetFinalizers()) != 0 || rule.Object["status"] != nil {
		t.Errorf("a standby rule-engine wrote the rule: finalizers %v, status %v", rule.GetFinalizers(), rule.Object["status"])
	}
	for _, name := range []string{events.ConsumerSourceScanner, events.ConsumerRuleEngine, events.ConsumerArgoSyncer, events.ConsumerTriggerDispatcher} {
		c, err := s.js.Consumer(context.Background(), events.StreamName, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if info.Delivered.Consumer != 0 || info.NumWaiting != 0 {
			t.Errorf("consumer %s: %d delivered, %d pull requests waiting; a standby must not pull", name, info.Delivered.Consumer, info.NumWaiting)
		}
	}

	// The holder goes away (its Leases deleted): the standbys take over and do the work.
	for _, name := range hubServices {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNS, Name: name + ".enforcement.globo.com"}}
		if err := s.kube.Client.Delete(context.Background(), lease); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 90*time.Second, func() error {
		return s.holds(agentApps(3), []string{"edge-1", "edge-2", "edge-3"}, []string{"edge-1", "edge-2", "edge-3"})
	})
}

// newSystemHeld is startSystem with leader election, after another holder took every hub
// service's Lease for an hour: every service starts standby.
func newSystemHeld(t *testing.T) *system {
	t.Helper()
	return newSystemWith(t, leaderElectionEnv, natsSingle, func(s *system) {
		now := metav1.NewMicroTime(time.Now())
		for _, name := range hubServices {
			lease := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: operatorNS, Name: name + ".enforcement.globo.com"},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("another-holder"), LeaseDurationSeconds: ptr.To[int32](3600),
					AcquireTime: &now, RenewTime: &now},
			}
			if err := s.kube.Client.Create(context.Background(), lease); err != nil {
				t.Fatal(err)
			}
		}
	})
}
