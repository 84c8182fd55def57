package main

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	argov1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	healthlib "github.com/argoproj/gitops-engine/pkg/health"
	synccommon "github.com/argoproj/gitops-engine/pkg/sync/common"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// TestCacheKeepsWhatArgoSyncerReads checks the informers' trim: an Application with the status
// Argo CD's controller writes after a sync is cached with its project and its spec's digest, and
// its whole spec only while it is not Enforcement's (cachedMeta has no place for its managed
// fields); it reports the health its status holds; one whose status compared another source is
// cached as not observed. A cluster Secret is cached with the digest of its config, not the
// config; an AppProject with its repositories and its spec's digest, and its whole spec only
// while it is not Enforcement's.
func TestCacheKeepsWhatArgoSyncerReads(t *testing.T) {
	source := argov1.ApplicationSource{RepoURL: "https://git.example/agent", Path: "charts/agent", TargetRevision: "HEAD"}
	dest := argov1.ApplicationDestination{Server: "https://c1.example", Namespace: "monitoring"}
	now := metav1.NewTime(time.Date(2026, 12, 4, 7, 0, 0, 0, time.UTC))
	app := &argov1.Application{
		ObjectMeta: metav1.ObjectMeta{
			Name: "c1-agent", ResourceVersion: "42",
			Annotations: map[string]string{
				AnnotationRule: "enforcement/baseline", AnnotationRuleUID: "uid-1", AnnotationCluster: "c1",
				AnnotationEnforcement: "agent", AnnotationSpecHash: "h1",
			},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationApply}},
		},
		Spec: argov1.ApplicationSpec{Source: &source, Destination: dest, Project: "c1"},
		Status: argov1.ApplicationStatus{
			Health:     argov1.HealthStatus{Status: healthlib.HealthStatusDegraded, Message: "Deployment agent: 0 of 1 ready"},
			Sync:       argov1.SyncStatus{Status: argov1.SyncStatusCodeSynced, ComparedTo: argov1.ComparedTo{Source: source, Destination: dest}, Revision: "abc"},
			Resources:  []argov1.ResourceStatus{{Kind: "Deployment", Name: "agent", Namespace: "monitoring"}},
			History:    argov1.RevisionHistories{{ID: 1, Revision: "abc", DeployedAt: now}},
			Conditions: []argov1.ApplicationCondition{{Type: argov1.ApplicationConditionSyncError, Message: "old"}},
			OperationState: &argov1.OperationState{
				Phase: synccommon.OperationFailed, Message: "one or more objects failed to apply",
				SyncResult: &argov1.SyncOperationResult{Revision: "abc", Resources: argov1.ResourceResults{{Name: "agent", Message: "forbidden"}}},
				StartedAt:  now,
			},
			ReconciledAt: &now,
		},
	}
	want := &events.ApplicationHealth{
		Rule: events.RuleRef{Namespace: "enforcement", Name: "baseline", UID: "uid-1"}, Cluster: "c1", Enforcement: "agent",
		Application: "c1-agent", SpecHash: "h1", Observed: true, ResourceVersion: "42",
		Health: "Degraded", Sync: "Synced", Operation: "Failed", Message: "one or more objects failed to apply",
	}
	wantSpec := app.Spec.DeepCopy()
	obj, err := trimForCache(app)
	if err != nil {
		t.Fatal(err)
	}
	trimmed := obj.(*cachedApplication)
	if got, _ := applicationHealth(trimmed); !reflect.DeepEqual(got, want) {
		t.Errorf("health after the trim:\n got %+v\nwant %+v", got, want)
	}
	if !reflect.DeepEqual(trimmed.Foreign, wantSpec) || trimmed.Name != "c1-agent" || trimmed.Project.String() != "c1" {
		t.Errorf("the trim changed the name %q, the project %q or the foreign spec %+v", trimmed.Name, trimmed.Project, trimmed.Foreign)
	}
	if trimmed.SpecDigest != digestSpec(*wantSpec) || trimmed.SpecDigest == (specDigest{}) {
		t.Errorf("spec digest %x, want %x", trimmed.SpecDigest, digestSpec(*wantSpec))
	}
	ours := app.DeepCopy()
	ours.Labels = map[string]string{LabelManagedBy: ManagedByValue}
	if c := cacheApplication(ours); c.Foreign != nil || c.SpecDigest != trimmed.SpecDigest {
		t.Errorf("Enforcement's own Application: cached spec %+v (want none), digest %x (want %x)", c.Foreign, c.SpecDigest, trimmed.SpecDigest)
	}
	if again, _ := trimForCache(trimmed); again != trimmed {
		t.Error("trimming a cached Application again made another")
	}
	app.Status.Sync.ComparedTo.Source.Path = "charts/old-agent"
	if stale := cacheApplication(app); stale.Status().Observed {
		t.Error("the status compared another source, yet the cache says the spec was observed")
	}

	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-c1", Namespace: "argocd", UID: "u-2", ResourceVersion: "7",
			Labels:        map[string]string{LabelManagedBy: ManagedByValue, LabelSecretType: SecretTypeCluster},
			Annotations:   map[string]string{AnnotationIdentity: "rancher/src1/c-c1"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: FieldManager}}},
		Data: map[string][]byte{"server": []byte("https://c1.example"), "name": []byte("c1"), "config": []byte(`{}`)},
	}
	obj, _ = trimForCache(secret)
	s := obj.(*cachedSecret)
	if s.Name != "cluster-c1" || s.Namespace != "argocd" || s.GetUID() != "u-2" || s.GetResourceVersion() != "7" || !owned(s) ||
		s.Annotations.Get(AnnotationIdentity) != "rancher/src1/c-c1" || s.Server != "https://c1.example" || s.ClusterName != "c1" {
		t.Errorf("cluster Secret after the trim: %+v", s)
	}
	if s.ConfigDigest != configDigest([]byte(`{}`)) {
		t.Errorf("cached cluster Secret's config digest %x, want the digest of {}", s.ConfigDigest)
	}
	if again, _ := trimForCache(s); again != s {
		t.Error("trimming a cached Secret again made another")
	}
	if c := cacheSecret(&corev1.Secret{}); c.ConfigDigest != ([sha256.Size]byte{}) || c.Server != "" {
		t.Errorf("a Secret without data caches %+v", c)
	}

	projectSpec := argov1.AppProjectSpec{SourceRepos: []string{"https://git.example/agent"},
		Destinations: []argov1.ApplicationDestination{{Server: "https://c1.example", Namespace: "*"}},
		Roles:        []argov1.ProjectRole{{Name: "viewer"}}}
	project := &argov1.AppProject{ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: "argocd", UID: "u-3",
		Labels: map[string]string{LabelManagedBy: ManagedByValue}, Annotations: map[string]string{AnnotationCluster: "c1"}},
		Spec: *projectSpec.DeepCopy()}
	obj, _ = trimForCache(project)
	p := obj.(*cachedProject)
	if p.Name != "c1" || p.GetUID() != "u-3" || !owned(p) || p.Annotations.Get(AnnotationCluster) != "c1" ||
		!slices.Equal(p.SourceRepos, projectSpec.SourceRepos) || p.SpecDigest != digestSpec(projectSpec) || p.Foreign != nil {
		t.Errorf("Enforcement's AppProject after the trim: %+v (want its repositories and digest, no spec)", p)
	}
	if again, _ := trimForCache(p); again != p {
		t.Error("trimming a cached AppProject again made another")
	}
	project.Labels = nil
	if c := cacheProject(project); c.Foreign == nil || !reflect.DeepEqual(*c.Foreign, projectSpec) {
		t.Errorf("an AppProject of someone else's keeps spec %+v, want %+v", c.Foreign, projectSpec)
	}
}

// TestCacheStoresRepeatedStringsOnce: two Applications decoded apart share, once trimmed, the
// strings a fleet repeats (a label key, the rule, the repository, the status's words); the
// intent that created each stays its own, and nothing reads differently.
func TestCacheStoresRepeatedStringsOnce(t *testing.T) {
	var apps []*cachedApplication
	for _, cluster := range []string{"c1", "c2"} {
		var app argov1.Application
		if err := json.Unmarshal(serverApplication(t, cluster, "agent"), &app); err != nil {
			t.Fatal(err)
		}
		want := app.DeepCopy()
		obj, err := trimForCache(&app)
		if err != nil {
			t.Fatal(err)
		}
		got := obj.(*cachedApplication)
		if !reflect.DeepEqual(got.GetLabels(), want.Labels) || !reflect.DeepEqual(got.GetAnnotations(), want.Annotations) || got.SpecDigest != digestSpec(want.Spec) {
			t.Errorf("%s reads differently after the trim:\n got %+v %+v %x\nwant %+v %+v %x", cluster, got.GetLabels(), got.GetAnnotations(), got.SpecDigest, want.Labels, want.Annotations, digestSpec(want.Spec))
		}
		apps = append(apps, got)
	}
	a, b := apps[0], apps[1]
	shared := func(what, x, y string) {
		t.Helper()
		if x != y || unsafe.StringData(x) != unsafe.StringData(y) {
			t.Errorf("%s: %q and %q are two copies, want one", what, x, y)
		}
	}
	shared("rule annotation", a.Annotations.Get(AnnotationRule), b.Annotations.Get(AnnotationRule))
	if a.status != b.status {
		t.Errorf("two Applications that report the same status keep two copies of it: %+v and %+v", a.Status(), b.Status())
	}
	if a.Labels.keys != b.Labels.keys || a.Annotations.keys != b.Annotations.keys {
		t.Error("two Applications of one rule keep two copies of their label or annotation keys")
	}
	for k := range a.Labels.Map() {
		for k2 := range b.Labels.Map() {
			if k == k2 {
				shared("label key", k, k2)
			}
		}
	}
	if x, y := a.Annotations.Get(AnnotationCreatedBy), b.Annotations.Get(AnnotationCreatedBy); x == y {
		t.Errorf("both Applications name intent %q as their creator", x)
	}
}

// TestOverlayListsByIndex: objects written but not yet in the informer's cache are listed under
// the index values of their latest version, and no longer once deleted or caught up with.
func TestOverlayListsByIndex(t *testing.T) {
	byCluster := cache.Indexers{"cluster": func(obj any) ([]string, error) {
		return []string{obj.(*cachedSecret).Labels.Get("cluster")}, nil
	}}
	// Never started: its cache stays empty, so everything listed comes from the overlay.
	informer := cache.NewSharedIndexInformer(&cache.ListWatch{}, &corev1.Secret{}, 0, byCluster)
	v := newView[*cachedSecret]("argocd", informer, nil)
	secret := func(name, cluster, rv string) *cachedSecret {
		return cacheSecret(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "argocd", UID: types.UID("uid-" + name),
			ResourceVersion: rv, Labels: map[string]string{"cluster": cluster}}})
	}
	names := func(cluster string) []string {
		var out []string
		for _, s := range v.list("cluster", cluster) {
			out = append(out, s.Name+"@"+s.GetResourceVersion())
		}
		slices.Sort(out)
		return out
	}
	check := func(step, cluster string, want ...string) {
		t.Helper()
		if got := names(cluster); !slices.Equal(got, want) {
			t.Errorf("%s: list(cluster=%s) = %v, want %v", step, cluster, got, want)
		}
	}
	v.wrote(secret("a", "c1", "1"))
	v.wrote(secret("b", "c1", "2"))
	v.wrote(secret("c", "c2", "3"))
	check("written", "c1", "a@1", "b@2")
	check("written", "c2", "c@3")

	v.wrote(secret("a", "c2", "4")) // moved to another cluster
	check("a moved", "c1", "b@2")
	check("a moved", "c2", "a@4", "c@3")

	v.removed("b", "uid-b", false)
	check("b deleted", "c1")

	v.seen(secret("a", "c2", "4")) // the informer caught up with a
	v.deleted(secret("c", "c2", "3"))
	check("caught up", "c2")
	if len(v.written.objects) != 0 || len(v.written.index["cluster"]) != 0 {
		t.Errorf("overlay left %v, index %v", v.written.objects, v.written.index)
	}
}

// TestOverlayKeepsOnlyWhatTheCacheLacks: a write whose watch event the informer delivered before
// the write's response came back leaves nothing in the overlay, and a deletion the informer saw
// before argo-syncer recorded it leaves no tombstone; neither would ever be cleared.
func TestOverlayKeepsOnlyWhatTheCacheLacks(t *testing.T) {
	informer := cache.NewSharedIndexInformer(&cache.ListWatch{}, &corev1.Secret{}, 0, cache.Indexers{})
	v := newView[*cachedSecret]("argocd", informer, nil)
	secret := func(rv string) *cachedSecret {
		return cacheSecret(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "argocd", UID: "uid-a", ResourceVersion: rv}})
	}
	cacheHolds := func(s *cachedSecret) {
		t.Helper()
		if err := informer.GetIndexer().Update(s); err != nil {
			t.Fatal(err)
		}
	}
	cacheHolds(secret("5"))
	v.seen(secret("5")) // the watch event, before the response
	v.wrote(secret("5"))
	if len(v.written.objects) != 0 {
		t.Errorf("a version the cache holds is overlaid: %v", v.written.objects)
	}
	v.wrote(secret("6")) // newer than the cache: overlaid until seen
	if got, ok, _ := v.get("a"); !ok || got.GetResourceVersion() != "6" {
		t.Errorf("get = %v %v, want version 6", got, ok)
	}
	cacheHolds(secret("6"))
	v.seen(secret("6"))
	if len(v.written.objects) != 0 {
		t.Errorf("overlay after the informer caught up: %v", v.written.objects)
	}

	if err := informer.GetIndexer().Delete(secret("6")); err != nil {
		t.Fatal(err)
	}
	v.deleted(secret("6")) // the informer saw the deletion first
	v.removed("a", "uid-a", false)
	if len(v.gone) != 0 {
		t.Errorf("tombstone left for a deletion the informer saw: %v", v.gone)
	}

	cacheHolds(secret("7"))
	v.removed("a", "uid-a", false) // deleted, the informer not told yet
	if _, ok, _ := v.get("a"); ok {
		t.Error("a deleted object is still found before the informer saw it go")
	}
	v.deleted(secret("7"))
	if len(v.gone) != 0 {
		t.Errorf("tombstone left after the informer saw the deletion: %v", v.gone)
	}
}

// BenchmarkCachedApplication measures what one Application costs argo-syncer's informer cache:
// 1,000 Applications as the API server sends them (managed fields and the status Argo CD's
// controller writes after a sync included) are decoded and trimmed as the informer does, and
// the live heap they hold after a GC is reported per object. Run it with
//
//	go test -run '^$' -bench Cached -benchtime 5x
func BenchmarkCachedApplication(b *testing.B) {
	const clusters, enforcements = 100, 10
	var wire [][]byte
	for c := range clusters {
		for e := range enforcements {
			wire = append(wire, serverApplication(b, fmt.Sprintf("cluster-%03d", c), fmt.Sprintf("enforcement-%d", e)))
		}
	}
	reportCachedBytes(b, wire, func() any { return &argov1.Application{} })
}

// BenchmarkCachedClusterSecret measures, as BenchmarkCachedApplication, what one cluster Secret
// costs the cache: 1,000 Secrets of clusters registered with a bearer token and their own CA, as
// the API server sends them.
func BenchmarkCachedClusterSecret(b *testing.B) {
	var wire [][]byte
	for c := range 1000 {
		wire = append(wire, serverClusterSecret(b, fmt.Sprintf("cluster-%03d", c)))
	}
	reportCachedBytes(b, wire, func() any { return &corev1.Secret{} })
}

// BenchmarkCachedAppProject measures, as BenchmarkCachedApplication, what one cluster's
// AppProject costs the cache: 1,000 AppProjects allowing ten rules' repositories, as the API
// server sends them.
func BenchmarkCachedAppProject(b *testing.B) {
	var repos []string
	for e := range 10 {
		repos = append(repos, fmt.Sprintf("https://git.example/enforcement-%d", e))
	}
	var wire [][]byte
	for c := range 1000 {
		wire = append(wire, serverAppProject(b, c, repos))
	}
	reportCachedBytes(b, wire, func() any { return &argov1.AppProject{} })
}

// keyIndexesOf indexes objects, all of type T, in key indexes of keyed, as a view does.
func keyIndexesOf[T kubeObject](objects []any, keyed map[string]func(T) string) []*keyIndex[T] {
	var out []*keyIndex[T]
	for _, value := range keyed {
		ix := newKeyIndex(value)
		for _, obj := range objects {
			ix.add(obj.(T))
		}
		out = append(out, ix)
	}
	return out
}

// serverAppProject is the JSON the API server returns for the AppProject argo-syncer renders
// for the c-th cluster with the given repositories.
func serverAppProject(b testing.TB, c int, repos []string) []byte {
	cluster := fmt.Sprintf("cluster-%03d", c)
	desired := RenderProject("argocd", newNames(cluster, ""), cluster, "https://"+cluster+".example:6443", repos, ProjectSettings{ClusterResources: true})
	desired.Metadata.Annotations[AnnotationIdentity] = "rancher/src1/c-" + cluster
	desired.seal()
	var p argov1.AppProject
	if err := json.Unmarshal(desired.body(), &p); err != nil {
		b.Fatal(err)
	}
	p.Generation = 1
	stampServerMeta(&p.ObjectMeta, c, c, metav1.ManagedFieldsOperationApply, "argoproj.io/v1alpha1",
		`{"f:metadata":{"f:annotations":{"f:enforcement.io/cluster":{},"f:enforcement.io/identity":{},"f:enforcement.io/spec-hash":{}},"f:labels":{"f:app.kubernetes.io/managed-by":{},"f:enforcement.io/cluster":{}}},"f:spec":{"f:clusterResourceWhitelist":{},"f:destinations":{},"f:sourceRepos":{}}}`)
	w, err := json.Marshal(&p)
	if err != nil {
		b.Fatal(err)
	}
	return w
}

// stampServerMeta fills in what the API server adds to an object argo-syncer wrote: a UID made
// from uidHigh and uidLow, a resource version, a creation time and one managed-fields entry of
// argo-syncer's field manager with the given operation and fields.
func stampServerMeta(meta *metav1.ObjectMeta, uidHigh, uidLow int, op metav1.ManagedFieldsOperationType, apiVersion, fields string) {
	now := metav1.NewTime(time.Date(2026, 12, 4, 7, 0, 0, 0, time.UTC))
	meta.UID = types.UID(fmt.Sprintf("5f0c2a9e-%04x-4d1b-9c3e-%012x", uidHigh, uidLow))
	meta.ResourceVersion, meta.CreationTimestamp = "123456", now
	meta.ManagedFields = []metav1.ManagedFieldsEntry{{
		Manager: FieldManager, Operation: op, APIVersion: apiVersion, Time: &now,
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)},
	}}
}

// reportCachedBytes decodes each object of wire into a new one and trims it as the informer
// does, and reports the live heap they hold after a GC, per object (median over b's loops).
func reportCachedBytes(b *testing.B, wire [][]byte, newObject func() any) {
	var perObject []float64
	for b.Loop() {
		before := testenv.LiveHeap()
		cached := decodeCached(b, wire, newObject)
		perObject = append(perObject, float64(testenv.LiveHeap()-before)/float64(len(cached)))
		runtime.KeepAlive(cached)
	}
	slices.Sort(perObject)
	b.ReportMetric(perObject[len(perObject)/2], "live-B/object")
}

// decodeCached decodes each object of wire into a new one and trims it as the informer does.
func decodeCached(b *testing.B, wire [][]byte, newObject func() any) []any {
	cached := make([]any, 0, len(wire))
	for _, w := range wire {
		obj := newObject()
		if err := json.Unmarshal(w, obj); err != nil {
			b.Fatal(err)
		}
		trimmed, err := trimForCache(obj)
		if err != nil {
			b.Fatal(err)
		}
		cached = append(cached, trimmed)
	}
	return cached
}

// serverClusterSecret is the JSON the API server returns for the cluster Secret argo-syncer
// renders for a cluster registered with a service account token and the cluster's own CA, the
// sizes of a real one (a 1,200-byte PEM, a 950-byte token).
func serverClusterSecret(b testing.TB, cluster string) []byte {
	in := intent(cluster, "agent")
	in.Cluster.Identity = "rancher/src1/c-" + cluster
	ca := fmt.Appendf(nil, "-----BEGIN CERTIFICATE-----\n%s\n-----END CERTIFICATE-----\n", strings.Repeat(cluster, 1150/len(cluster)))
	token := "eyJhbGciOiJSUzI1NiIsImtpZCI6I" + strings.Repeat(cluster, 920/len(cluster))
	sec, err := RenderClusterSecret("argocd", in.Cluster, argov1.ClusterConfig{BearerToken: token, TLSClientConfig: argov1.TLSClientConfig{CAData: ca}})
	if err != nil {
		b.Fatal(err)
	}
	stampServerMeta(&sec.ObjectMeta, len(cluster), len(cluster), metav1.ManagedFieldsOperationUpdate, "v1",
		`{"f:data":{".":{},"f:config":{},"f:name":{},"f:server":{}},"f:metadata":{"f:annotations":{".":{},"f:enforcement.io/cluster":{},"f:enforcement.io/identity":{}},"f:labels":{".":{},"f:app.kubernetes.io/managed-by":{},"f:argocd.argoproj.io/secret-type":{},"f:enforcement.io/cluster":{}}},"f:type":{}}`)
	w, err := json.Marshal(sec)
	if err != nil {
		b.Fatal(err)
	}
	return w
}

// serverApplication is the JSON the API server returns for the Application argo-syncer renders
// for the pair, after Argo CD synced it.
func serverApplication(b testing.TB, cluster, enforcement string) []byte {
	in := intent(cluster, enforcement)
	in.Cluster.Identity = "rancher/src1/c-" + cluster
	in.SpecHash = fmt.Sprintf("%064x", len(enforcement))
	desired := RenderApplication("argocd", in, newNames(cluster, enforcement))
	desired.Metadata.Annotations[AnnotationCreatedBy] = "install." + cluster + "." + enforcement + ".0123456789abcdef"
	desired.seal()
	var app argov1.Application
	if err := json.Unmarshal(desired.body(), &app); err != nil {
		b.Fatal(err)
	}
	app.Generation = 1
	stampServerMeta(&app.ObjectMeta, len(cluster), len(enforcement), metav1.ManagedFieldsOperationApply, "argoproj.io/v1alpha1",
		`{"f:metadata":{"f:annotations":{"f:enforcement.io/cluster":{},"f:enforcement.io/enforcement":{},"f:enforcement.io/rule":{},"f:enforcement.io/rule-uid":{},"f:enforcement.io/spec-hash":{}},"f:labels":{"f:app.kubernetes.io/managed-by":{},"f:enforcement.io/cluster":{}}},"f:spec":{"f:destination":{"f:name":{},"f:namespace":{}},"f:project":{},"f:source":{"f:helm":{"f:parameters":{}},"f:path":{},"f:repoURL":{},"f:targetRevision":{}},"f:syncPolicy":{"f:automated":{"f:prune":{},"f:selfHeal":{}},"f:syncOptions":{}}}}`)
	now := app.CreationTimestamp
	source := *app.Spec.Source
	app.Status = argov1.ApplicationStatus{
		Health:    argov1.HealthStatus{Status: healthlib.HealthStatusHealthy},
		Sync:      argov1.SyncStatus{Status: argov1.SyncStatusCodeSynced, ComparedTo: argov1.ComparedTo{Source: source, Destination: app.Spec.Destination}, Revision: "0123456789abcdef0123456789abcdef01234567"},
		Resources: []argov1.ResourceStatus{{Kind: "Deployment", Name: enforcement, Namespace: "monitoring", Status: argov1.SyncStatusCodeSynced}},
		History:   argov1.RevisionHistories{{ID: 1, Revision: "0123456789abcdef0123456789abcdef01234567", DeployedAt: now, Source: source}},
		OperationState: &argov1.OperationState{
			Phase: synccommon.OperationSucceeded, Message: "successfully synced (all tasks run)", StartedAt: now, FinishedAt: &now,
			SyncResult: &argov1.SyncOperationResult{Revision: "0123456789abcdef0123456789abcdef01234567", Source: source},
		},
		ReconciledAt: &now,
		SourceType:   argov1.ApplicationSourceTypeHelm,
	}
	w, err := json.Marshal(&app)
	if err != nil {
		b.Fatal(err)
	}
	return w
}

// A cached Application keeps its labels and annotations as sorted lists; they read as the maps
// they came from, and a map the getters return is the caller's own. Of the rest of the metadata
// it keeps what argo-syncer reads, and reads it through metav1.Object as the informer does.
func TestCachedApplicationMetadataReadsAsMaps(t *testing.T) {
	labels := map[string]string{LabelManagedBy: ManagedByValue, LabelCluster: "prod", "empty": "", "a": "first", "z": "last"}
	deleting := metav1.Now()
	app := cacheApplication(&argov1.Application{ObjectMeta: metav1.ObjectMeta{Name: "prod-agent", Namespace: "argocd",
		UID: "u-1", ResourceVersion: "42", Generation: 3, CreationTimestamp: deleting, DeletionTimestamp: &deleting,
		Finalizers: []string{"resources-finalizer.argocd.argoproj.io"}, Labels: labels,
		Annotations: map[string]string{AnnotationCluster: "prod"}}})
	var o metav1.Object = app
	if o.GetName() != "prod-agent" || o.GetNamespace() != "argocd" || o.GetUID() != "u-1" || o.GetResourceVersion() != "42" ||
		!o.GetDeletionTimestamp().Equal(&deleting) || !slices.Equal(o.GetFinalizers(), []string{"resources-finalizer.argocd.argoproj.io"}) {
		t.Errorf("metadata read back as %s/%s uid %s version %s deleting %v finalizers %v", o.GetNamespace(), o.GetName(),
			o.GetUID(), o.GetResourceVersion(), o.GetDeletionTimestamp(), o.GetFinalizers())
	}
	if key, err := cache.MetaNamespaceKeyFunc(app); err != nil || key != "argocd/prod-agent" {
		t.Errorf("informer key %q, %v", key, err)
	}
	o.GetFinalizers()[0] = "changed"
	if cp := app.DeepCopyObject().(*cachedApplication); app.Finalizers[0] != "resources-finalizer.argocd.argoproj.io" ||
		&cp.Finalizers[0] == &app.Finalizers[0] || cp.DeletionTimestamp == app.DeletionTimestamp {
		t.Error("the finalizers or the deletion time are shared with a getter's result or a copy")
	}
	if got := app.GetLabels(); !reflect.DeepEqual(got, labels) || app.Labels.Len() != len(labels) {
		t.Errorf("labels read %v (%d), want %v", got, app.Labels.Len(), labels)
	}
	for k, v := range labels {
		if got, ok := app.Labels.Lookup(k); !ok || got != v {
			t.Errorf("Lookup(%q) = %q, %t; want %q", k, got, ok, v)
		}
	}
	for _, k := range []string{"", "0", "b", "zz", "cluster"} {
		if got, ok := app.Labels.Lookup(k); ok || got != "" {
			t.Errorf("Lookup(%q) = %q, %t; want no value", k, got, ok)
		}
	}
	if !owned(app) || labelOf(app, LabelCluster) != "prod" || annotationOf(app, AnnotationCluster) != "prod" {
		t.Error("owned, labelOf or annotationOf do not read the kept labels and annotations")
	}
	got := app.GetLabels()
	got[LabelCluster] = "changed"
	cp := app.DeepCopyObject().(*cachedApplication)
	if app.Labels.Get(LabelCluster) != "prod" || cp.Labels.Get(LabelCluster) != "prod" {
		t.Error("changing a map GetLabels returned changed the cached Application")
	}
	cp.SetAnnotations(nil)
	if cp.GetAnnotations() != nil || app.Annotations.Get(AnnotationCluster) != "prod" {
		t.Error("SetAnnotations on a copy changed the original, or kept annotations")
	}
	if empty := cacheApplication(&argov1.Application{}); empty.Labels.values != nil || empty.GetLabels() != nil || empty.Labels.Len() != 0 {
		t.Errorf("an Application without labels keeps %v", empty.Labels)
	}
}

// BenchmarkCachedCluster measures what one cluster costs argo-syncer's informer caches as a
// whole: its Secret, its AppProject and ten Applications, decoded and trimmed as the informers
// do and held in stores with the informers' indexers and the views' key indexes. It reports
// the live heap per cluster of the objects alone (objects-B/cluster) and with the stores' keys
// and indexes (live-B/cluster).
func BenchmarkCachedCluster(b *testing.B) {
	const clusters, enforcements = 1000, 10
	var repos []string
	for e := range enforcements {
		repos = append(repos, fmt.Sprintf("https://git.example/enforcement-%d", e))
	}
	type kind struct {
		wire      [][]byte
		newObject func() any
		indexers  cache.Indexers
	}
	apps := kind{newObject: func() any { return &argov1.Application{} }, indexers: applicationIndexers()}
	projects := kind{newObject: func() any { return &argov1.AppProject{} }, indexers: projectIndexers()}
	secrets := kind{newObject: func() any { return &corev1.Secret{} }, indexers: cache.Indexers{}}
	for c := range clusters {
		cluster := fmt.Sprintf("cluster-%03d", c)
		for e := range enforcements {
			apps.wire = append(apps.wire, serverApplication(b, cluster, fmt.Sprintf("enforcement-%d", e)))
		}
		projects.wire = append(projects.wire, serverAppProject(b, c, repos))
		secrets.wire = append(secrets.wire, serverClusterSecret(b, cluster))
	}
	kinds := []kind{apps, projects, secrets}
	var objectBytes, liveBytes []float64
	for b.Loop() {
		before := testenv.LiveHeap()
		cached := make([][]any, len(kinds))
		for i, k := range kinds {
			cached[i] = decodeCached(b, k.wire, k.newObject)
		}
		objects := testenv.LiveHeap()
		stores := make([]cache.Indexer, len(kinds))
		for i, k := range kinds {
			stores[i] = cache.NewIndexer(cache.MetaNamespaceKeyFunc, k.indexers)
			for _, obj := range cached[i] {
				if err := stores[i].Add(obj); err != nil {
					b.Fatal(err)
				}
			}
		}
		keyIndexes := []any{keyIndexesOf(cached[0], applicationKeys()), keyIndexesOf(cached[2], secretKeys())}
		after := testenv.LiveHeap()
		objectBytes = append(objectBytes, float64(objects-before)/clusters)
		liveBytes = append(liveBytes, float64(after-before)/clusters)
		runtime.KeepAlive(stores)
		runtime.KeepAlive(keyIndexes)
	}
	slices.Sort(objectBytes)
	slices.Sort(liveBytes)
	b.ReportMetric(objectBytes[len(objectBytes)/2], "objects-B/cluster")
	b.ReportMetric(liveBytes[len(liveBytes)/2], "live-B/cluster")
}

// TestKeyIndexFollowsTheCache: a view's key index lists an object under its value as the
// informer's events move it, several objects of one value included, and forgets it when deleted.
func TestKeyIndexFollowsTheCache(t *testing.T) {
	informer := cache.NewSharedIndexInformer(&cache.ListWatch{}, &corev1.Secret{}, 0, cache.Indexers{})
	v := newView("argocd", informer, secretKeys())
	secret := func(name, server, rv string) *cachedSecret {
		return cacheSecret(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "argocd", UID: types.UID("uid-" + name),
			ResourceVersion: rv}, Data: map[string][]byte{"server": []byte(server), "name": []byte(name)}})
	}
	// The informer's store first, then its handler, as the informer does.
	add := func(s *cachedSecret) {
		t.Helper()
		if err := informer.GetIndexer().Add(s); err != nil {
			t.Fatal(err)
		}
		v.reindex(nil, s)
	}
	update := func(old, s *cachedSecret) {
		t.Helper()
		if err := informer.GetIndexer().Update(s); err != nil {
			t.Fatal(err)
		}
		v.reindex(old, s)
	}
	remove := func(s *cachedSecret) {
		t.Helper()
		if err := informer.GetIndexer().Delete(s); err != nil {
			t.Fatal(err)
		}
		v.deleted(cache.DeletedFinalStateUnknown{Key: "argocd/" + s.Name, Obj: s})
	}
	check := func(step, server string, want ...string) {
		t.Helper()
		var got []string
		for _, s := range v.list(indexServer, server) {
			got = append(got, s.Name+"@"+s.GetResourceVersion())
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: list(server=%s) = %v, want %v", step, server, got, want)
		}
	}
	a1, b1 := secret("a", "https://one", "1"), secret("b", "https://one", "2")
	add(a1)
	check("a added", "https://one", "a@1")
	add(b1)
	check("b of the same server", "https://one", "a@1", "b@2")
	f := secret("f", "https://one", "7")
	add(f)
	check("f of the same server", "https://one", "a@1", "b@2", "f@7")
	a2 := secret("a", "https://two", "3")
	update(a1, a2)
	check("a moved", "https://one", "b@2", "f@7")
	remove(f)
	check("f deleted", "https://one", "b@2")
	check("a moved", "https://two", "a@3")
	b2 := secret("b", "https://one", "4")
	update(b1, b2)
	check("b updated in place", "https://one", "b@4")
	c := secret("c", "https://two", "5")
	add(c)
	remove(a2)
	check("a deleted", "https://two", "c@5")
	if got := v.list(indexName, "c"); len(got) != 1 || got[0].Name != "c" {
		t.Errorf("list(name=c) = %v", got)
	}
	remove(b2)
	remove(c)
	if ix := v.keyed[indexServer]; len(ix.one) != 0 || len(ix.more) != 0 {
		t.Errorf("server index after every Secret went: %v %v", ix.one, ix.more)
	}
	if ix := v.keyed[indexName]; len(ix.one) != 0 || len(ix.more) != 0 {
		t.Errorf("name index after every Secret went: %v %v", ix.one, ix.more)
	}
	// What argo-syncer wrote is listed before the informer has it.
	v.wrote(secret("d", "https://three", "6"))
	check("d written", "https://three", "d@6")
}
