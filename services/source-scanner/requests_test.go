package main

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/clusterprofile"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/ocm"
)

// fleetSize is the number of clusters the request-counting tests list.
const fleetSize = 1000

// countedLister is the lister of a source, built as the scan loop builds it, whose requests to
// the shared API server (the in-cluster hub, the source Secret, the static ConfigMap) are
// recorded, and which reports on synced when its watch, if any, has synced.
type countedLister struct {
	sourceLister
	log    *testenv.RequestLog
	synced chan struct{}
}

func newCountedLister(t *testing.T, spec *sourceSpec) *countedLister {
	t.Helper()
	kube := testenv.SharedKube(t)
	l := &countedLister{log: &testenv.RequestLog{}, synced: make(chan struct{}, 1)}
	cfg := l.log.Wrap(kube.Config)
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.sourceLister = spec.lister(listerDeps{kube: c, kubeCfg: cfg, watchCtx: ctx, trigger: func(string) {
		select {
		case l.synced <- struct{}{}:
		default:
		}
	}})
	t.Cleanup(func() { l.Close(); cancel() })
	return l
}

// scan lists the source once and returns the clusters whose name starts with prefix and the
// requests the listing sent, by kind ("GET secrets", "LIST managedclusters", ...). With
// watchSync, it first waits for the watch the listing started to sync, so its requests are
// counted too.
func (l *countedLister) scan(t *testing.T, prefix string, watchSync bool) (int, map[string]int) {
	t.Helper()
	mark := l.log.Mark()
	clusters, err := l.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if watchSync {
		select {
		case <-l.synced:
		case <-time.After(30 * time.Second):
			t.Fatal("the watch did not sync within 30s")
		}
	}
	n := 0
	for _, c := range clusters {
		if strings.HasPrefix(c.Name, prefix) {
			n++
		}
	}
	return n, requestKinds(l.log.Since(mark))
}

// requestKinds counts requests by verb and resource: "GET <resource>" for a read of one
// object, "LIST <resource>" for a read of a collection, "WATCH <resource>" for a watch, and
// "DISCOVERY" for a read of the API's resource list (/api/v1, /apis/<group>/<version>, which
// a client's REST mapper makes once per group at its first use).
func requestKinds(reqs []testenv.Request) map[string]int {
	kinds := map[string]int{}
	for _, r := range reqs {
		parts := strings.Split(strings.Trim(r.Path, "/"), "/")
		last := parts[len(parts)-1]
		switch {
		case parts[0] == "api" && len(parts) <= 2 || parts[0] == "apis" && len(parts) <= 3:
			kinds["DISCOVERY"]++
		case r.Method != http.MethodGet:
			kinds[r.Method+" "+last]++
		case r.Watch:
			kinds["WATCH "+last]++
		case isCollection(parts):
			kinds["LIST "+last]++
		default:
			kinds["GET "+parts[len(parts)-2]]++
		}
	}
	return kinds
}

// isCollection reports whether an API path names a collection: /api/v1/<resource>,
// /api/v1/namespaces/<ns>/<resource>, /apis/<group>/<version>/<resource> or its namespaced form.
func isCollection(parts []string) bool {
	n := len(parts) - 2 // after api/v1
	if parts[0] == "apis" {
		n-- // after apis/<group>/<version>
	}
	return n == 1 || n == 3 && parts[len(parts)-3] == "namespaces"
}

// createAll creates n objects made by obj(i), eight at a time.
func createAll(t *testing.T, k client.Client, n int, obj func(i int) client.Object) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				errs <- k.Create(context.Background(), obj(i))
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestOCMRequestsPerScan counts the hub requests of an OCM source with 1,000 ManagedClusters:
// the answer to a list is never paged, so a scan costs one Secret GET and one LIST whatever the
// fleet's size; the first scan also starts the watch (one LIST and one WATCH), which a rescan
// does not repeat.
func TestOCMRequestsPerScan(t *testing.T) {
	kube := testenv.SharedKube(t)
	kube.InstallCRDs(t, testenv.OCMCRDs()...)
	k := kube.TypedClient(t)
	ns := kube.Namespace(t, "ocm-requests")
	const label = "enforcement.globo.com/test-fleet"
	createAll(t, k, fleetSize, func(i int) client.Object {
		mc := &unstructured.Unstructured{}
		mc.SetGroupVersionKind(ocm.ManagedClusterList.GroupVersion().WithKind("ManagedCluster"))
		mc.SetName(fmt.Sprintf("fleet-%04d", i))
		mc.SetLabels(map[string]string{label: "requests"})
		mc.Object["spec"] = map[string]any{"hubAcceptsClient": true,
			"managedClusterClientConfigs": []any{map[string]any{"url": fmt.Sprintf("https://fleet-%04d.example.com", i)}}}
		return mc
	})
	t.Cleanup(func() {
		mc := &unstructured.Unstructured{}
		mc.SetGroupVersionKind(ocm.ManagedClusterList.GroupVersion().WithKind("ManagedCluster"))
		_ = k.DeleteAllOf(context.Background(), mc, client.MatchingLabels{label: "requests"})
	})

	l := newCountedLister(t, &sourceSpec{Ref: events.SourceRef{Kind: events.SourceKindOCM, ID: "ocm-requests", SecretNamespace: ns, SecretName: "ocm"}})
	n, first := l.scan(t, "fleet-", true)
	if n != fleetSize {
		t.Fatalf("listed %d of the fleet's ManagedClusters, want %d", n, fleetSize)
	}
	want := map[string]int{"DISCOVERY": 2, "GET secrets": 1, "LIST managedclusters": 2, "WATCH managedclusters": 1}
	if !reflect.DeepEqual(first, want) {
		t.Errorf("first scan of %d ManagedClusters: %v, want %v (the client's discovery of v1 and the OCM group, the scan's Secret GET and LIST, the watch's LIST and WATCH)", fleetSize, first, want)
	}
	for range 2 {
		_, again := l.scan(t, "fleet-", false)
		if want := map[string]int{"GET secrets": 1, "LIST managedclusters": 1}; !reflect.DeepEqual(again, want) {
			t.Errorf("rescan of %d ManagedClusters: %v, want %v", fleetSize, again, want)
		}
	}
}

// TestClusterProfileRequestsPerScan counts the hub requests of a ClusterProfile source of two
// namespaces holding 1,000 profiles: one Secret GET and one LIST per namespace per scan, never
// paged; the first scan also starts the watch (one LIST and one WATCH of every namespace, since
// the source has several), which a rescan does not repeat.
func TestClusterProfileRequestsPerScan(t *testing.T) {
	kube := testenv.SharedKube(t)
	kube.InstallCRDs(t, testenv.ClusterProfileCRDs()...)
	k := kube.TypedClient(t)
	operator := kube.Namespace(t, "cp-requests-operator")
	namespaces := []string{kube.Namespace(t, "cp-requests-a"), kube.Namespace(t, "cp-requests-b")}
	createAll(t, k, fleetSize, func(i int) client.Object {
		cp := &unstructured.Unstructured{}
		cp.SetGroupVersionKind(clusterprofile.ListKind.GroupVersion().WithKind("ClusterProfile"))
		cp.SetNamespace(namespaces[i%2])
		cp.SetName(fmt.Sprintf("fleet-%04d", i))
		cp.Object["spec"] = map[string]any{"displayName": cp.GetName(), "clusterManager": map[string]any{"name": "fleet"}}
		return cp
	})
	t.Cleanup(func() { // the API server has no namespace controller to delete them with their namespaces
		for _, ns := range namespaces {
			cp := &unstructured.Unstructured{}
			cp.SetGroupVersionKind(clusterprofile.ListKind.GroupVersion().WithKind("ClusterProfile"))
			_ = k.DeleteAllOf(context.Background(), cp, client.InNamespace(ns))
		}
	})

	l := newCountedLister(t, &sourceSpec{Namespaces: namespaces,
		Ref: events.SourceRef{Kind: events.SourceKindClusterProfile, ID: "cp-requests", SecretNamespace: operator, SecretName: "clusterprofile"}})
	n, first := l.scan(t, "fleet-", true)
	if n != fleetSize {
		t.Fatalf("listed %d of the fleet's ClusterProfiles, want %d", n, fleetSize)
	}
	want := map[string]int{"DISCOVERY": 2, "GET secrets": 1, "LIST clusterprofiles": 3, "WATCH clusterprofiles": 1}
	if !reflect.DeepEqual(first, want) {
		t.Errorf("first scan of %d ClusterProfiles in 2 namespaces: %v, want %v (the client's discovery of v1 and the group, the Secret GET, one LIST per namespace, the watch's LIST and WATCH)", fleetSize, first, want)
	}
	for range 2 {
		_, again := l.scan(t, "fleet-", false)
		if want := map[string]int{"GET secrets": 1, "LIST clusterprofiles": 2}; !reflect.DeepEqual(again, want) {
			t.Errorf("rescan of %d ClusterProfiles in 2 namespaces: %v, want %v", fleetSize, again, want)
		}
	}
}

// TestStaticRequestsPerScan: a static source of 1,000 clusters costs one ConfigMap GET per
// scan, and nothing else.
func TestStaticRequestsPerScan(t *testing.T) {
	kube := testenv.SharedKube(t)
	k := kube.TypedClient(t)
	ns := kube.Namespace(t, "static-requests")
	var b strings.Builder
	for i := range fleetSize {
		fmt.Fprintf(&b, "- {name: fleet-%04d, url: 'https://fleet-%04d.example.com:6443'}\n", i, i)
	}
	if err := k.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: events.DefaultStaticConfigMap},
		Data: map[string]string{"clusters.yaml": b.String()}}); err != nil {
		t.Fatal(err)
	}
	l := newCountedLister(t, &sourceSpec{ConfigMap: events.DefaultStaticConfigMap,
		Ref: events.SourceRef{Kind: events.SourceKindStatic, ID: "static-requests", SecretNamespace: ns, SecretName: "static"}})
	for scan, want := range []map[string]int{{"DISCOVERY": 1, "GET configmaps": 1}, {"GET configmaps": 1}, {"GET configmaps": 1}} {
		n, reqs := l.scan(t, "fleet-", false)
		if n != fleetSize {
			t.Fatalf("listed %d clusters, want %d", n, fleetSize)
		}
		if !reflect.DeepEqual(reqs, want) {
			t.Errorf("scan %d of %d static clusters: %v, want %v (the first one with the client's discovery of v1)", scan+1, fleetSize, reqs, want)
		}
	}
}
