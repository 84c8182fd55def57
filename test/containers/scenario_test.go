package containers

// TestProduct runs the product's story on the built images, one system for the whole story (the
// system takes most of the run time to start; the steps build on each other's state):
//
//  1. clusters appear in Rancher → cluster Secrets, AppProjects and Applications exist
//  2. a cluster goes → its objects are removed after GONE_GRACE_PERIOD
//  3. Rancher fails (503), then answers an empty listing → nothing is removed
//  4. rule-engine, then argo-syncer, is stopped while a cluster appears → both converge on
//     restart; no event id twice in the stream, no Application created twice
//  5. NATS restarts on its volume → every event of the stream is still there, and the services
//     carry on
//
// The rule is the original operator's example (../shared/examples/enforcement/example-rancher.yaml)
// applied unchanged, with the rancher Secret (url, token, caCert) in OPERATOR_NAMESPACE.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/enforcement-io/enforcement/pkg/events"
)

var (
	applicationsGVR = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"}
	appProjectsGVR  = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "appprojects"}
	clusterRulesGVR = schema.GroupVersionResource{Group: "enforcement.globo.com", Version: "v1beta1", Resource: "clusterrules"}
)

// The example rule's enforcements, which every matching cluster gets one Application of.
var exampleEnforcements = []string{"helm-guestbook", "guestbook"}

// examplesDir holds the original operator's manifests (shared/ sits beside the repository).
const examplesDir = "../../../shared/examples/enforcement"

func TestProduct(t *testing.T) {
	requireDocker(t)
	began := time.Now()
	s := startSystem(t)
	t.Logf("System ready in %s", time.Since(began).Round(100*time.Millisecond))
	_, js := s.connectNATS(t)

	// The rancher Secret: the original's keys (url, token) plus caCert for the fake's own CA.
	s.createSecret(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "rancher", Namespace: operatorNamespace},
		StringData: map[string]string{"url": "https://rancher:8443", "token": rancherToken, "caCert": string(s.rancherCA)},
	})
	// cluster1 is listed with the rule's driver and label but named in its ignore list; c-other
	// runs another driver, which the rule's Rancher filter leaves out.
	ignored := rancherCluster("c-ign01", "cluster1", "active")
	other := rancherCluster("c-oth01", "other-driver", "active")
	other["driver"] = "amazonElasticContainerService"
	alpha, bravo := rancherCluster("c-alpha", "alpha", "active"), rancherCluster("c-bravo", "bravo", "active")
	s.setClusters(t, alpha, bravo, ignored, other)
	s.applyExample(t, "example-rancher.yaml")

	var alphaUIDs map[string]types.UID
	ok := t.Run("clusters appear", func(t *testing.T) {
		s.eventually(t, 60*time.Second, func() error { return s.installed("alpha", "bravo") })
		alphaUIDs = s.applications(t, "alpha")
		for _, name := range []string{"cluster1", "other-driver"} {
			if apps := s.applications(t, name); len(apps) != 0 {
				t.Errorf("cluster %s is left out by the rule, but has Applications %v", name, keys(apps))
			}
		}
	})
	ok = ok && t.Run("a cluster goes", func(t *testing.T) {
		s.setClusters(t, alpha, ignored, other)
		absent := time.Now()
		s.eventually(t, 30*time.Second, func() error { return s.removed("bravo") })
		// Not before the grace period: absence alone is not enough.
		if waited := time.Since(absent); waited < gonePeriod {
			t.Errorf("bravo removed %s after it left the listing, before GONE_GRACE_PERIOD=%s", waited, gonePeriod)
		}
		s.sameApplications(t, "alpha", alphaUIDs)
	})
	ok = ok && t.Run("a failing source removes nothing", func(t *testing.T) {
		since := time.Now()
		s.failRancher(t, 503)
		s.waitScans(t, gonePeriod+3*scanInterval)
		s.sameApplications(t, "alpha", alphaUIDs)
		s.failRancher(t, 0)
		s.setClusters(t) // an empty answer from a source that had clusters
		s.waitScans(t, gonePeriod+3*scanInterval)
		s.sameApplications(t, "alpha", alphaUIDs)
		s.setClusters(t, alpha, ignored, other)

		reasons := map[string]bool{}
		for _, m := range readStream(t, js) {
			if m.Type == "io.enforcement.source.degraded.v1" && m.Time.After(since) {
				var body struct {
					Reason string `json:"reason"`
				}
				_ = json.Unmarshal(m.Data, &body)
				reasons[body.Reason] = true
			}
			if m.Type == "io.enforcement.cluster.gone.v1" && m.Time.After(since) {
				t.Errorf("cluster gone published while the source was degraded: %s", m.Subject)
			}
		}
		if len(reasons) < 2 {
			t.Errorf("source degraded reasons published = %v, want one for the failure and one for the empty listing", keys(reasons))
		}
	})
	for _, svc := range []struct{ service, cluster, id string }{
		{"rule-engine", "charlie", "c-charl"},
		{"argo-syncer", "delta", "c-delta"},
	} {
		ok = ok && t.Run(svc.service+" stopped while a cluster appears", func(t *testing.T) {
			restart(t, s.services[svc.service], func() {
				s.addCluster(t, rancherCluster(svc.id, svc.cluster, "active"))
				// The world moved on without the stopped service: the scanner announced the cluster.
				s.eventually(t, 20*time.Second, func() error { return s.published(js, "io.enforcement.cluster.appeared.v1", svc.cluster) })
				if apps := s.applications(t, svc.cluster); len(apps) != 0 {
					t.Errorf("Applications of %s exist while %s is stopped: %v", svc.cluster, svc.service, keys(apps))
				}
			})
			s.eventually(t, 60*time.Second, func() error { return s.installed("alpha", "charlie", svc.cluster) })
			s.sameApplications(t, "alpha", alphaUIDs)
		})
	}
	ok = ok && t.Run("no duplicates", func(t *testing.T) {
		msgs := readStream(t, js)
		assertUniqueIDs(t, msgs)
		created := map[string]int{}
		for _, m := range msgs {
			if m.Type != "io.enforcement.install.succeeded.v1" {
				continue
			}
			var body events.InstallSucceeded
			if err := json.Unmarshal(m.Data, &body); err != nil {
				t.Fatalf("decode %s: %v", m.Subject, err)
			}
			if body.Created {
				created[body.Application]++
			}
		}
		for _, cluster := range []string{"alpha", "charlie", "delta"} {
			for _, e := range exampleEnforcements {
				if n := created[events.ApplicationName(cluster, e)]; n != 1 {
					t.Errorf("Application %s created %d times, want once", events.ApplicationName(cluster, e), n)
				}
			}
		}
	})
	if ok {
		t.Run("NATS restarts on its volume", func(t *testing.T) {
			before := readStream(t, js)
			restart(t, s.nats, nil)
			_, js = s.connectNATS(t) // the published port changed
			s.eventually(t, 30*time.Second, func() error {
				_, err := js.Stream(context.Background(), events.StreamName)
				return err
			})
			after := readStream(t, js)
			bySeq := map[uint64]string{}
			for _, m := range after {
				bySeq[m.Seq] = m.ID
			}
			lost := 0
			for _, m := range before {
				if bySeq[m.Seq] != m.ID {
					lost++
				}
			}
			t.Logf("Stream held %d events before the restart, %d after", len(before), len(after))
			if lost > 0 || len(after) < len(before) {
				t.Fatalf("%d of %d events lost in the NATS restart (%d after)", lost, len(before), len(after))
			}
			// The services reconnected: a new cluster is installed, and every event is still unique.
			s.addCluster(t, rancherCluster("c-echo1", "echo", "active"))
			s.eventually(t, 60*time.Second, func() error { return s.installed("alpha", "charlie", "delta", "echo") })
			assertUniqueIDs(t, readStream(t, js))
			s.sameApplications(t, "alpha", alphaUIDs)
		})
	}
	t.Logf("Scenario done in %s", time.Since(began).Round(100*time.Millisecond))
}

// rancherCluster is a Rancher v3 cluster object that the example rule selects: driver
// googleKubernetesEngine (its filter) and label cattle.io/creator=norman (its labels).
func rancherCluster(id, name, state string) map[string]any {
	return map[string]any{
		"id":          id,
		"type":        "cluster",
		"baseType":    "cluster",
		"name":        name,
		"state":       state,
		"driver":      "googleKubernetesEngine",
		"provider":    "gke",
		"labels":      map[string]any{"cattle.io/creator": "norman", "provider.cattle.io": "gke"},
		"annotations": map[string]any{},
		"created":     "2024-01-01T00:00:00Z",
		"allocatable": map[string]any{"cpu": "8", "memory": "32Gi"},
		"conditions":  []any{map[string]any{"type": "Ready", "status": "True", "lastUpdateTime": time.Now().UTC().Format(time.RFC3339)}},
	}
}

// addCluster adds a cluster to the fake Rancher's current listing of the scenario.
func (s *system) addCluster(t *testing.T, c map[string]any) {
	t.Helper()
	s.listing = append(s.listing, c)
	s.setClusters(t, s.listing...)
}

// applyExample creates the ClusterRule of an example manifest, unchanged, in OPERATOR_NAMESPACE.
func (s *system) applyExample(t *testing.T, file string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(examplesDir, file))
	if err != nil {
		t.Fatalf("the examples of shared/ are beside the repository: %v", err)
	}
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &obj.Object); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	obj.SetNamespace(operatorNamespace)
	if _, err := s.dyn.Resource(clusterRulesGVR).Namespace(operatorNamespace).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ClusterRule from %s: %v", file, err)
	}
}

func (s *system) createSecret(t *testing.T, secret *corev1.Secret) {
	t.Helper()
	if _, err := s.kubeClient.CoreV1().Secrets(secret.Namespace).Create(context.Background(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Secret %s: %v", secret.Name, err)
	}
}

// installed is nil when every cluster has its cluster Secret, its AppProject and one
// Application per enforcement of the example rule.
func (s *system) installed(clusters ...string) error {
	ctx := context.Background()
	var missing []string
	for _, c := range clusters {
		if err := s.clusterSecret(ctx, c); err != nil {
			missing = append(missing, err.Error())
		}
		if _, err := s.dyn.Resource(appProjectsGVR).Namespace(argoCDNamespace).Get(ctx, events.ObjectName(c), metav1.GetOptions{}); err != nil {
			missing = append(missing, fmt.Sprintf("AppProject %s: %v", c, err))
		}
		for _, e := range exampleEnforcements {
			name := events.ApplicationName(c, e)
			if _, err := s.dyn.Resource(applicationsGVR).Namespace(argoCDNamespace).Get(ctx, name, metav1.GetOptions{}); err != nil {
				missing = append(missing, fmt.Sprintf("Application %s: %v", name, err))
			}
		}
	}
	if len(missing) > 0 {
		return errors.New(strings.Join(missing, "; "))
	}
	return nil
}

// removed is nil once a cluster has no Application, AppProject or cluster Secret left.
func (s *system) removed(cluster string) error {
	ctx := context.Background()
	var left []string
	apps, err := s.dyn.Resource(applicationsGVR).Namespace(argoCDNamespace).List(ctx, metav1.ListOptions{LabelSelector: "cluster_name=" + cluster})
	if err != nil {
		return err
	}
	for _, a := range apps.Items {
		left = append(left, "Application "+a.GetName())
	}
	if _, err := s.dyn.Resource(appProjectsGVR).Namespace(argoCDNamespace).Get(ctx, events.ObjectName(cluster), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		left = append(left, fmt.Sprintf("AppProject %s (%v)", cluster, err))
	}
	if err := s.clusterSecret(ctx, cluster); err == nil {
		left = append(left, "cluster Secret of "+cluster)
	}
	if len(left) > 0 {
		return fmt.Errorf("still there: %s", strings.Join(left, ", "))
	}
	return nil
}

// clusterSecret is nil when Argo CD knows the cluster: a Secret labelled
// argocd.argoproj.io/secret-type=cluster whose name key is the cluster's name.
func (s *system) clusterSecret(ctx context.Context, cluster string) error {
	list, err := s.kubeClient.CoreV1().Secrets(argoCDNamespace).List(ctx, metav1.ListOptions{LabelSelector: "argocd.argoproj.io/secret-type=cluster"})
	if err != nil {
		return err
	}
	for _, sec := range list.Items {
		if string(sec.Data["name"]) == cluster {
			return nil
		}
	}
	return fmt.Errorf("no cluster Secret for %s", cluster)
}

// applications maps the names of a cluster's Applications to their UIDs.
func (s *system) applications(t *testing.T, cluster string) map[string]types.UID {
	t.Helper()
	list, err := s.dyn.Resource(applicationsGVR).Namespace(argoCDNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: "cluster_name=" + cluster})
	if err != nil {
		t.Fatalf("list Applications: %v", err)
	}
	out := map[string]types.UID{}
	for _, a := range list.Items {
		out[a.GetName()] = a.GetUID()
	}
	return out
}

// sameApplications fails unless the cluster's Applications are exactly want, same objects
// (UIDs): nothing was deleted and created again.
func (s *system) sameApplications(t *testing.T, cluster string, want map[string]types.UID) {
	t.Helper()
	got := s.applications(t, cluster)
	if len(got) != len(want) {
		t.Fatalf("Applications of %s = %v, want %v", cluster, keys(got), keys(want))
	}
	for name, uid := range want {
		if got[name] != uid {
			t.Fatalf("Application %s was replaced or removed (uid %q, want %q)", name, got[name], uid)
		}
	}
}

// waitScans waits at least d and for the fake Rancher to have answered a few more listings, so
// that the scanner saw the current state for longer than d.
func (s *system) waitScans(t *testing.T, d time.Duration) {
	t.Helper()
	start, n := time.Now(), s.rancherRequests(t)
	s.eventually(t, d+30*time.Second, func() error {
		if seen := s.rancherRequests(t) - n; time.Since(start) < d || seen < 3 {
			return fmt.Errorf("%d listings in %s", seen, time.Since(start).Round(time.Second))
		}
		return nil
	})
}

// published is nil once the stream holds an event of type typ whose subject ends in cluster.
func (s *system) published(js jetstream.JetStream, typ, cluster string) error {
	for _, m := range readStreamErr(js) {
		if m.Type == typ && strings.HasSuffix(m.Subject, "."+cluster) {
			return nil
		}
	}
	return fmt.Errorf("no %s event for %s yet", typ, cluster)
}

// eventually retries f until it returns nil or timeout passes, then fails with f's last error.
func (s *system) eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// streamMessage is what the tests read of one message of the stream.
type streamMessage struct {
	Seq     uint64
	ID      string // Nats-Msg-Id, the event's deterministic id
	Type    string // ce-type
	Subject string
	Time    time.Time
	Data    []byte
}

// readStream reads every message of the ENFORCEMENT stream, in order.
func readStream(t *testing.T, js jetstream.JetStream) []streamMessage {
	t.Helper()
	msgs, err := readStreamUntil(js)
	if err != nil {
		t.Fatalf("read stream: %v", err)
	}
	return msgs
}

func readStreamErr(js jetstream.JetStream) []streamMessage {
	msgs, _ := readStreamUntil(js)
	return msgs
}

// readStreamUntil reads the stream up to its last sequence at the time of the call with an
// ordered consumer (ephemeral, nothing to clean up).
func readStreamUntil(js jetstream.JetStream) ([]streamMessage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, events.StreamName)
	if err != nil {
		return nil, err
	}
	last := stream.CachedInfo().State.LastSeq
	var out []streamMessage
	if last == 0 {
		return out, nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	for {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return out, err
		}
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return out, err
			}
			out = append(out, streamMessage{
				Seq: meta.Sequence.Stream, ID: m.Headers().Get("Nats-Msg-Id"), Type: m.Headers().Get("ce-type"),
				Subject: m.Subject(), Time: meta.Timestamp, Data: m.Data(),
			})
			if meta.Sequence.Stream >= last {
				return out, nil
			}
		}
		if err := batch.Error(); err != nil {
			return out, err
		}
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
	}
}

// assertUniqueIDs fails when an event id (Nats-Msg-Id) is in the stream more than once.
func assertUniqueIDs(t *testing.T, msgs []streamMessage) {
	t.Helper()
	seen := map[string][]uint64{}
	for _, m := range msgs {
		if m.ID == "" {
			t.Errorf("message %d (%s) has no Nats-Msg-Id", m.Seq, m.Subject)
			continue
		}
		seen[m.ID] = append(seen[m.ID], m.Seq)
	}
	var dups []string
	for id, seqs := range seen {
		if len(seqs) > 1 {
			dups = append(dups, fmt.Sprintf("%s at %v", id, seqs))
		}
	}
	sort.Strings(dups)
	if len(dups) > 0 {
		t.Errorf("%d event ids are in the stream more than once: %s", len(dups), strings.Join(dups, "; "))
	}
	t.Logf("%d events in the stream, every id once: %t", len(msgs), len(dups) == 0)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
