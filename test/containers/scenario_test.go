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
// The rule is the original operator's example (enforcement/example-rancher.yaml of the
// compatibility suite, pkg/testenv/compat) applied unchanged, with the rancher Secret (url, token, caCert) in OPERATOR_NAMESPACE.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/pkg/testenv/compat"
)

var (
	applicationsGVR = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"}
	appProjectsGVR  = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "appprojects"}
	clusterRulesGVR = schema.GroupVersionResource{Group: "enforcement.globo.com", Version: "v1beta1", Resource: "clusterrules"}
)

// The example rule's enforcements, which every matching cluster gets one Application of.
var exampleEnforcements = []string{"helm-guestbook", "guestbook"}

func TestProduct(t *testing.T) {
	requireDocker(t)
	began := time.Now()
	s := startSystem(t)
	t.Logf("System ready in %s", time.Since(began).Round(100*time.Millisecond))
	js := s.connectNATS(t)

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
		testenv.Eventually(t, 60*time.Second, func() error { return s.installed("alpha", "bravo") })
		alphaUIDs = s.applications(t, "alpha")
		for _, name := range []string{"cluster1", "other-driver"} {
			if apps := s.applications(t, name); len(apps) != 0 {
				t.Errorf("cluster %s is left out by the rule, but has Applications %v", name, keys(apps))
			}
		}
	})
	ok = ok && t.Run("each service keeps its heap under its container's memory limit", func(t *testing.T) {
		// 90 % of the container's limit, as the Go runtime's soft limit (pkg/service).
		const want = serviceMemoryLimit * 9 / 10
		for _, name := range hubServices {
			metrics := httpGet(t, endpoint(context.Background(), t, s.services[name], "8080/tcp", "http")+"/metrics")
			if got := metricValue(string(metrics), "go_gc_gomemlimit_bytes"); got != want {
				t.Errorf("%s in a container limited to %d bytes: Go's memory limit %.0f bytes, want %d", name, serviceMemoryLimit, got, want)
			}
		}
	})
	ok = ok && t.Run("a cluster goes", func(t *testing.T) {
		s.setClusters(t, alpha, ignored, other)
		absent := time.Now()
		testenv.Eventually(t, 30*time.Second, func() error { return s.removed("bravo") })
		// Not before the grace period: absence alone is not enough.
		if waited := time.Since(absent); waited < gonePeriod {
			t.Errorf("bravo removed %s after it left the listing, before GONE_GRACE_PERIOD=%s", waited, gonePeriod)
		}
		s.sameApplications(t, "alpha", alphaUIDs)
	})
	ok = ok && t.Run("a failing source removes nothing", func(t *testing.T) {
		stream := eventstest.NewReader(t, js)
		stream.New(t) // what came before the failure
		s.failRancher(t, 503)
		s.waitScans(t, gonePeriod+3*scanInterval)
		s.sameApplications(t, "alpha", alphaUIDs)
		s.failRancher(t, 0)
		s.setClusters(t) // an empty answer from a source that had clusters
		s.waitScans(t, gonePeriod+3*scanInterval)
		s.sameApplications(t, "alpha", alphaUIDs)
		s.setClusters(t, alpha, ignored, other)

		reasons := map[string]bool{}
		for _, e := range stream.New(t) {
			switch e := e.(type) {
			case *events.SourceDegraded:
				reasons[e.Reason] = true
			case *events.ClusterGone:
				t.Errorf("cluster gone published while the source was degraded: %s", e.Name)
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
				stream := eventstest.NewReader(t, js)
				s.addCluster(t, rancherCluster(svc.id, svc.cluster, "active"))
				// The world moved on without the stopped service: the scanner announced the cluster.
				testenv.Eventually(t, 20*time.Second, func() error { return appeared(t, stream, svc.cluster) })
				if apps := s.applications(t, svc.cluster); len(apps) != 0 {
					t.Errorf("Applications of %s exist while %s is stopped: %v", svc.cluster, svc.service, keys(apps))
				}
			})
			testenv.Eventually(t, 60*time.Second, func() error { return s.installed("alpha", "charlie", svc.cluster) })
			s.sameApplications(t, "alpha", alphaUIDs)
		})
	}
	ok = ok && t.Run("no duplicates", func(t *testing.T) {
		stored := eventstest.NewReader(t, js).New(t)
		assertUniqueIDs(t, stored)
		created := map[string]int{}
		for _, e := range stored {
			if ok, is := e.(*events.InstallSucceeded); is && ok.Created {
				created[ok.Application]++
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
	if !ok {
		return // a failed step leaves nothing to restart onto
	}
	t.Run("NATS restarts on its volume", func(t *testing.T) {
		before := eventstest.NewReader(t, js).New(t)
		restart(t, s.nats, nil)
		js = s.connectNATS(t) // the published port changed
		// The reader reads the stream in sequence order: an event kept is at the same place.
		after := eventstest.NewReader(t, js).New(t)
		lost := 0
		for i, e := range before {
			if i >= len(after) || after[i].ID() != e.ID() {
				lost++
			}
		}
		t.Logf("Stream held %d events before the restart, %d after", len(before), len(after))
		if lost > 0 || len(after) < len(before) {
			t.Fatalf("%d of %d events lost in the NATS restart (%d after)", lost, len(before), len(after))
		}
		// The services reconnected: a new cluster is installed, and every event is still unique.
		s.addCluster(t, rancherCluster("c-echo1", "echo", "active"))
		testenv.Eventually(t, 60*time.Second, func() error { return s.installed("alpha", "charlie", "delta", "echo") })
		assertUniqueIDs(t, eventstest.NewReader(t, js).New(t))
		s.sameApplications(t, "alpha", alphaUIDs)
	})
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

// metricValue is the value of the unlabelled metric name in a Prometheus text exposition; -1
// when it has none.
func metricValue(exposition, name string) float64 {
	for _, line := range strings.Split(exposition, "\n") {
		if value, ok := strings.CutPrefix(line, name+" "); ok {
			if v, err := strconv.ParseFloat(value, 64); err == nil {
				return v
			}
		}
	}
	return -1
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
	objs := compat.Objects(t, "enforcement/"+file)
	if len(objs) != 1 || objs[0].GetKind() != "ClusterRule" {
		t.Fatalf("%s: want one ClusterRule, the suite has %d objects", file, len(objs))
	}
	obj := objs[0]
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
	testenv.Eventually(t, d+30*time.Second, func() error {
		if seen := s.rancherRequests(t) - n; time.Since(start) < d || seen < 3 {
			return fmt.Errorf("%d listings in %s", seen, time.Since(start).Round(time.Second))
		}
		return nil
	})
}

// appeared is nil once the reader has come across the cluster appeared event of cluster.
func appeared(t *testing.T, stream *eventstest.Reader, cluster string) error {
	for _, e := range stream.New(t) {
		if a, ok := e.(*events.ClusterAppeared); ok && a.Cluster.Name == cluster {
			return nil
		}
	}
	return fmt.Errorf("no cluster appeared event for %s yet", cluster)
}

// assertUniqueIDs fails when an event id (its Nats-Msg-Id) is in the stream more than once. A
// dead letter carries the id of the event it holds, so it counts as a second copy: none is
// expected in this story.
func assertUniqueIDs(t *testing.T, stored []events.Event) {
	t.Helper()
	seen := map[string][]int{}
	for i, e := range stored {
		seen[e.ID()] = append(seen[e.ID()], i+1)
	}
	var dups []string
	for id, at := range seen {
		if len(at) > 1 {
			dups = append(dups, fmt.Sprintf("%s (the %v stored events)", id, at))
		}
	}
	sort.Strings(dups)
	if len(dups) > 0 {
		t.Errorf("%d event ids are in the stream more than once: %s", len(dups), strings.Join(dups, "; "))
	}
	t.Logf("%d events in the stream, every id once: %t", len(stored), len(dups) == 0)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
