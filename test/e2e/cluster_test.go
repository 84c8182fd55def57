package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// fleetSize is how many clusters TestNATSClusterFailoverUnderLoad carries.
const fleetSize = 1000

// TestNATSClusterFailoverUnderLoad runs the four hub services on a 3-node NATS cluster (streams
// and buckets with three replicas) and carries 1,000 static clusters with beforeInstall and
// afterInstall triggers to their Applications. While they flow, one NATS node is killed, every
// hub service is restarted in turn (SIGTERM, as a rolling update), and the node comes back.
// Afterwards every Application exists exactly once and was never deleted and recreated (one
// UID per name, no delete seen), each trigger reached its receiver under one id per intent
// (repeats carry that id), every event is stored once, and nothing was dead-lettered. It
// prints the figures.
func TestNATSClusterFailoverUnderLoad(t *testing.T) {
	started := time.Now()
	hooks := newHookRecorder(t)
	s := startSystemOnNATSCluster(t, map[string]string{"TRIGGER_ALLOWED_NETWORKS": "127.0.0.0/8", "LOG_LEVEL": "info"})
	apps := watchApplications(t, s)

	var clusters strings.Builder
	want := make([]string, 0, fleetSize)
	for i := range fleetSize {
		name := fmt.Sprintf("fleet-%04d", i)
		fmt.Fprintf(&clusters, "- name: %s\n  url: https://%s.example:6443\n", name, name)
		want = append(want, name+"-agent")
	}
	sortStrings(want)
	s.createSecret("static", map[string][]byte{"token": []byte("static-token")})
	s.staticRule(clusters.String(), fmt.Sprintf(`  triggers:
    beforeInstall:
      endpoint: %[1]s/before
    afterInstall:
      endpoint: %[1]s/after
`, hooks.url))

	// Mid-stream: a NATS node goes, the services restart one after the other, the node returns.
	testenv.Eventually(t, 120*time.Second, func() error {
		if n := apps.count(); n < fleetSize/5 {
			return fmt.Errorf("%d Applications so far", n)
		}
		return nil
	})
	t.Logf("%d Applications after %s; killing NATS node n1", apps.count(), time.Since(started).Round(time.Second))
	s.cluster.Kill(0)
	for _, name := range hubServices {
		s.restart(name)
		t.Logf("restarted %s (%d Applications)", name, apps.count())
	}
	s.cluster.Restart(0)
	t.Logf("NATS node n1 back (%d Applications)", apps.count())

	deadline := time.Now().Add(150 * time.Second)
	for {
		have := s.names(gvrApplication)
		err := equal("Applications", have, want)
		if err == nil {
			err = hooks.complete(fleetSize)
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			unexplained := missing(want, have)
			for _, hook := range hooks.missing(fleetSize) { // "<path> <cluster>"
				_, cluster, _ := strings.Cut(hook, " ")
				unexplained = append(unexplained, cluster+"-agent")
			}
			s.explainMissing(unexplained)
			t.Fatalf("after 150s: %d of %d Applications, %v; webhooks never delivered: %v",
				len(have), fleetSize, hooks.complete(fleetSize), hooks.missing(fleetSize))
		}
		time.Sleep(time.Second)
	}
	time.Sleep(2 * time.Second) // a late duplicate side effect would show now

	if got := len(s.names(gvrAppProject)); got != fleetSize {
		t.Errorf("%d AppProjects, want %d", got, fleetSize)
	}
	if got := len(s.clusterSecretNames()); got != fleetSize {
		t.Errorf("%d cluster Secrets, want %d", got, fleetSize)
	}
	recreated, deleted := apps.recreated()
	for _, name := range recreated {
		t.Errorf("Application %s was deleted and recreated (more than one UID)", name)
	}
	if deleted > 0 {
		t.Errorf("%d Application deletions seen", deleted)
	}
	hookIDs, hookRepeats, hookDuplicates := hooks.figures(t)

	var dead []string
	for _, consumer := range []string{events.ConsumerRuleEngine, events.ConsumerArgoSyncer, events.ConsumerTriggerDispatcher, events.ConsumerSourceScanner} {
		dls, err := events.ListDeadLetters(context.Background(), s.js, consumer)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range dls {
			dead = append(dead, fmt.Sprintf("%s: %s: %s", consumer, d.OriginalSubject, d.Reason))
		}
	}
	for _, d := range dead {
		t.Errorf("dead letter %s", d)
	}
	stored := len(s.audit())
	checkNoDuplicates(t, s)
	lost := fleetSize - len(s.names(gvrApplication))
	t.Logf("figures: %d clusters, %d events in the R3 stream, %d Applications lost, %d recreated, "+
		"%d webhook ids (%d repeats with the same id), %d duplicate webhook intents, %d dead letters, %s in all",
		fleetSize, stored, lost, len(recreated), hookIDs, hookRepeats, hookDuplicates, len(dead), time.Since(started).Round(time.Second))
}

// hookRecorder is a webhook receiver that records, per path and cluster, the webhook-id of
// every delivery.
type hookRecorder struct {
	url string
	mu  sync.Mutex
	ids map[string]map[string]int // "<path> <cluster>" -> webhook-id -> deliveries
}

func newHookRecorder(t *testing.T) *hookRecorder {
	h := &hookRecorder{ids: map[string]map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var p struct {
			Cluster struct {
				Name string `json:"name"`
			} `json:"cluster"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		key := r.URL.Path + " " + p.Cluster.Name
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.ids[key] == nil {
			h.ids[key] = map[string]int{}
		}
		h.ids[key][r.Header.Get("webhook-id")]++
	}))
	t.Cleanup(srv.Close)
	h.url = srv.URL
	return h
}

// complete is nil once both triggers of n clusters were delivered.
func (h *hookRecorder) complete(n int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.ids) < 2*n {
		return fmt.Errorf("webhooks of %d (cluster, trigger) pairs, want %d", len(h.ids), 2*n)
	}
	return nil
}

// missing lists the (trigger, cluster) pairs of the first n fleet clusters that got no
// delivery, at most ten.
func (h *hookRecorder) missing(n int) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for i := 0; i < n && len(out) < 10; i++ {
		for _, path := range []string{"/before", "/after"} {
			if key := fmt.Sprintf("%s fleet-%04d", path, i); h.ids[key] == nil {
				out = append(out, key)
			}
		}
	}
	return out
}

// figures counts the delivery ids, the repeats (deliveries beyond the first of an id) and the
// (cluster, trigger) pairs that got more than one id: a side effect delivered twice as two
// intents. Each of the latter fails the test.
func (h *hookRecorder) figures(t *testing.T) (ids, repeats, duplicates int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for key, byID := range h.ids {
		if len(byID) > 1 {
			duplicates++
			t.Errorf("webhook %s delivered under %d ids, want one", key, len(byID))
		}
		for id, n := range byID {
			if id == "" {
				t.Errorf("webhook %s delivered without a webhook-id", key)
			}
			ids++
			repeats += n - 1
		}
	}
	return ids, repeats, duplicates
}

// appWatch follows the Applications of the Argo CD namespace with a watch, recording every UID
// each name had and every deletion.
type appWatch struct {
	mu      sync.Mutex
	uids    map[string]map[string]bool
	deleted int
}

func watchApplications(t *testing.T, s *system) *appWatch {
	w := &appWatch{uids: map[string]map[string]bool{}}
	s.watchApplications(t, func(typ watch.EventType, u *unstructured.Unstructured, _ time.Time) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.uids[u.GetName()] == nil {
			w.uids[u.GetName()] = map[string]bool{}
		}
		w.uids[u.GetName()][string(u.GetUID())] = true
		if typ == watch.Deleted {
			w.deleted++
		}
	})
	return w
}

// watchApplications calls seen, on a goroutine of its own, with each Application added, changed
// or deleted in the Argo CD namespace and the time the event arrived, until the test ends. A
// watch that ends or expires is started again (after an expiry from a fresh list, which
// reports every Application again as added).
func (s *system) watchApplications(t testing.TB, seen func(watch.EventType, *unstructured.Unstructured, time.Time)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		rv := ""
		for ctx.Err() == nil {
			wi, err := s.dyn.Resource(gvrApplication).Namespace(argoNS).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			for ev := range wi.ResultChan() {
				at := time.Now()
				if ev.Type == watch.Error { // the version expired: list afresh
					rv = ""
					break
				}
				u, ok := ev.Object.(*unstructured.Unstructured)
				if !ok {
					continue
				}
				rv = u.GetResourceVersion()
				if ev.Type != watch.Bookmark {
					seen(ev.Type, u, at)
				}
			}
			wi.Stop()
		}
	}()
}

// count is the number of Application names seen.
func (w *appWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.uids)
}

// recreated lists the names seen with more than one UID, and counts the deletions seen.
func (w *appWatch) recreated() ([]string, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for name, uids := range w.uids {
		if len(uids) > 1 {
			out = append(out, name)
		}
	}
	sortStrings(out)
	return out, w.deleted
}

// missing lists the names of want that have lacks (both sorted).
func missing(want, have []string) []string {
	in := map[string]bool{}
	for _, h := range have {
		in[h] = true
	}
	var out []string
	for _, w := range want {
		if !in[w] {
			out = append(out, w)
		}
	}
	return out
}

// explainMissing logs, for each Application (at most five) that is missing or lacks a webhook,
// every service log line that names its cluster, so that a failure says where its way ended.
func (s *system) explainMissing(apps []string) {
	for _, app := range apps[:min(len(apps), 5)] {
		cluster := strings.TrimSuffix(app, "-agent")
		for _, name := range hubServices {
			b, _ := os.ReadFile(filepath.Join(s.logs, name+".log"))
			for _, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, cluster) {
					s.t.Logf("%s missing; %s: %s", app, name, line)
				}
			}
		}
		s.logStreamEvents(app, `"`+cluster+`"`)
	}
}

// logStreamEvents logs every event of the stream whose data holds needle, oldest first: the
// decisions taken for a missing Application.
func (s *system) logStreamEvents(app, needle string) {
	err := eventstest.EachMessage(context.Background(), s.js, events.StreamName, func(m *jetstream.RawStreamMsg) {
		if strings.Contains(string(m.Data), needle) {
			s.t.Logf("%s missing; stream #%d %s %s: %.400s", app, m.Sequence, m.Time.Format("15:04:05.000"), m.Subject, m.Data)
		}
	})
	if err != nil {
		s.t.Log(err)
	}
}
