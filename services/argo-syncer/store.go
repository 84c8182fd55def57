package main

// The store is argo-syncer's read path: informers over the Applications, AppProjects and
// cluster Secrets of the Argo CD namespace, so that handling an intent reads memory instead of
// sending one GET per cluster × enforcement.
//
// An informer lags behind the writes argo-syncer itself makes. Two intents of one cluster in a
// row would otherwise read a stale AppProject (and drop a repository the first one added), and an
// install right after an uninstall would find the deleted object still cached and write nothing.
// Each view therefore overlays the objects argo-syncer wrote (until the informer has caught up)
// and tombstones the ones it deleted (until the informer has seen the deletion).

import (
	"crypto/sha256"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unique"

	argov1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// kubeObject is a typed API object.
type kubeObject interface {
	metav1.Object
	runtime.Object
}

// cachedObject is what a view holds: a cached projection of an API object (cachedMeta), whose
// identity newer and sameObject compare.
type cachedObject interface {
	kubeObject
	identified
}

// tombstone remembers an object argo-syncer deleted. A terminating one (a finalizer delays its
// removal) still exists and must not be recreated or updated until it is gone.
type tombstone struct {
	uid         types.UID
	terminating bool
}

// view is one informer plus argo-syncer's own recent writes and deletions.
type view[T cachedObject] struct {
	ns       string
	informer cache.SharedIndexInformer
	// onDelete, if set, is called with every object the informer sees deleted.
	onDelete func(T)

	mu      sync.Mutex
	written overlay[T]
	gone    map[string]tombstone
	// keyed are the view's key indexes by index name, beside the informer's indexes
	// (keyIndex); the overlay indexes its objects by both.
	keyed map[string]*keyIndex[T]
}

// newView makes the view of an informer, with a key index for each entry of keyed: the function
// that reads an object's value for that index ("" when it has none).
func newView[T cachedObject](ns string, informer cache.SharedIndexInformer, keyed map[string]func(T) string) *view[T] {
	indexers := maps.Clone(informer.GetIndexer().GetIndexers())
	v := &view[T]{ns: ns, informer: informer, gone: map[string]tombstone{}, keyed: map[string]*keyIndex[T]{}}
	for name, value := range keyed {
		v.keyed[name] = newKeyIndex(value)
		indexers[name] = func(obj any) ([]string, error) {
			if o, ok := obj.(T); ok && value(o) != "" {
				return []string{value(o)}, nil
			}
			return nil, nil
		}
	}
	v.written = newOverlay[T](indexers)
	// Before the informer starts, so it never fails.
	_ = informer.SetTransform(trimForCache)
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { v.reindex(nil, obj); v.seen(obj) },
		UpdateFunc: func(old, obj any) { v.reindex(old, obj); v.seen(obj) },
		DeleteFunc: v.deleted,
	})
	return v
}

// reindex moves an object the informer now holds as obj, and held as old (nil: it did not), in
// the key indexes; obj nil: it holds it no more.
func (v *view[T]) reindex(old, obj any) {
	if len(v.keyed) == 0 {
		return
	}
	before, hadBefore := old.(T)
	after, hasAfter := obj.(T)
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, ix := range v.keyed {
		if hadBefore && hasAfter && before.GetName() == after.GetName() && ix.value(before) == ix.value(after) {
			continue // the usual update: the indexed value did not change
		}
		if hadBefore {
			ix.remove(before)
		}
		if hasAfter {
			ix.add(after)
		}
	}
}

// seen drops the overlay entry once the informer holds the written version or a newer one.
func (v *view[T]) seen(obj any) {
	o, ok := obj.(T)
	if !ok {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if w, ok := v.written.objects[o.GetName()]; ok && !newer(w, o) {
		v.written.drop(o.GetName())
	}
}

func (v *view[T]) deleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	o, ok := obj.(T)
	if !ok {
		return
	}
	v.reindex(o, nil)
	v.mu.Lock()
	if t, ok := v.gone[o.GetName()]; ok && t.uid == o.GetUID() {
		delete(v.gone, o.GetName())
	}
	if w, ok := v.written.objects[o.GetName()]; ok && sameObject(w, o) {
		v.written.drop(o.GetName())
	}
	v.mu.Unlock()
	if v.onDelete != nil {
		v.onDelete(o)
	}
}

// newer reports whether a is a later version of the same object than b, or another object
// (objectIdentity.newerThan: resource versions are etcd revisions; an unparsable one counts as
// newer, so argo-syncer's own write wins).
func newer(a, b identified) bool { return a.identity().newerThan(b.identity()) }

// newerVersion reports whether resource version a is later than b (newer's rule).
func newerVersion(a, b string) bool {
	ra, errA := strconv.ParseUint(a, 10, 64)
	rb, errB := strconv.ParseUint(b, 10, 64)
	if errA != nil || errB != nil {
		return a != b
	}
	return ra > rb
}

// sameObject reports whether a and b have the same UID.
func sameObject(a, b identified) bool { return a.identity().sameObject(b.identity()) }

// identified is a cached projection (cachedMeta): newer and sameObject compare its UID and
// resource version without building their strings.
type identified interface{ identity() objectIdentity }

// get returns the freshest known version of the named object. ok is false when it does not
// exist (or argo-syncer deleted it without a finalizer); terminating is true while it is being
// deleted.
func (v *view[T]) get(name string) (obj T, ok, terminating bool) {
	var zero T
	obj, ok = v.cached(name)
	v.mu.Lock()
	defer v.mu.Unlock()
	if w, found := v.written.objects[name]; found && (!ok || newer(w, obj)) {
		obj, ok = w, true
	}
	if !ok {
		return zero, false, false
	}
	if t, found := v.gone[name]; found && t.uid == obj.GetUID() {
		if !t.terminating {
			return zero, false, false
		}
		return obj, true, true
	}
	return obj, true, obj.GetDeletionTimestamp() != nil
}

// list returns the freshest known objects whose index entry for indexName is value, skipping the
// ones argo-syncer deleted.
func (v *view[T]) list(indexName, value string) []T {
	var names []string
	if ix, ok := v.keyed[indexName]; ok {
		v.mu.Lock()
		names = slices.Clip(ix.names(value)) // an append below copies it; the index's stays
		v.mu.Unlock()
	} else {
		items, _ := v.informer.GetIndexer().ByIndex(indexName, value)
		for _, item := range items {
			if o, ok := item.(T); ok {
				names = append(names, o.GetName())
			}
		}
	}
	// Objects written but not cached yet.
	v.mu.Lock()
	if written := v.written.index[indexName][value]; len(written) > 0 {
		listed := make(map[string]bool, len(names))
		for _, name := range names {
			listed[name] = true
		}
		for name := range written {
			if !listed[name] {
				names = append(names, name)
			}
		}
	}
	v.mu.Unlock()
	var out []T
	for _, name := range names {
		if latest, exists, _ := v.get(name); exists {
			out = append(out, latest)
		}
	}
	return out
}

// wrote records an object returned by a write.
//
// The informer updates its cache before it calls seen, and the watch event of a write can come
// before the write's own response: when the cache holds this version already, there is nothing to
// overlay (an entry would wait for the object's next change, a whole response kept for nothing:
// 10 MB at 1,000 clusters × 10 rules).
func (v *view[T]) wrote(obj T) {
	if trimmed, err := trimForCache(obj); err == nil {
		if t, ok := trimmed.(T); ok {
			obj = t // the overlay keeps what the cache would
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if t, ok := v.gone[obj.GetName()]; ok && t.uid != obj.GetUID() {
		delete(v.gone, obj.GetName())
	}
	if cached, ok := v.cached(obj.GetName()); ok && !newer(obj, cached) {
		v.written.drop(obj.GetName()) // and any older version
		return
	}
	v.written.put(obj)
}

// removed records that argo-syncer deleted the object with this uid.
//
// argo-syncer deletes only objects it read from this view. One that is neither cached nor
// overlaid any more was seen gone by the informer already: no tombstone, which nothing would
// clear.
func (v *view[T]) removed(name string, uid types.UID, terminating bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	w, overlaid := v.written.objects[name]
	overlaid = overlaid && w.GetUID() == uid
	if overlaid {
		v.written.drop(name)
	}
	if cached, ok := v.cached(name); !overlaid && (!ok || cached.GetUID() != uid) {
		return
	}
	v.gone[name] = tombstone{uid: uid, terminating: terminating}
}

// cached returns the informer's version of the named object.
func (v *view[T]) cached(name string) (T, bool) {
	var zero T
	item, exists, _ := v.informer.GetIndexer().GetByKey(v.ns + "/" + name)
	if !exists {
		return zero, false
	}
	obj, ok := item.(T)
	return obj, ok
}

// overlay holds the objects argo-syncer wrote that its informer has not caught up with, indexed
// like the informer's cache: during a burst of writes it holds thousands, and a list must cost
// what it returns, not the overlay's size.
type overlay[T kubeObject] struct {
	indexers cache.Indexers
	objects  map[string]T
	// index is index name → indexed value → names of the objects with that value.
	index map[string]map[string]map[string]struct{}
}

func newOverlay[T kubeObject](indexers cache.Indexers) overlay[T] {
	return overlay[T]{indexers: indexers, objects: map[string]T{}, index: map[string]map[string]map[string]struct{}{}}
}

// put records obj in place of any earlier version of it.
func (o *overlay[T]) put(obj T) {
	name := obj.GetName()
	o.drop(name)
	o.objects[name] = obj
	for indexName, values := range o.indexValues(obj) {
		byValue := o.index[indexName]
		if byValue == nil {
			byValue = map[string]map[string]struct{}{}
			o.index[indexName] = byValue
		}
		for _, value := range values {
			if byValue[value] == nil {
				byValue[value] = map[string]struct{}{}
			}
			byValue[value][name] = struct{}{}
		}
	}
}

// drop forgets the named object.
func (o *overlay[T]) drop(name string) {
	obj, ok := o.objects[name]
	if !ok {
		return
	}
	delete(o.objects, name)
	for indexName, values := range o.indexValues(obj) {
		for _, value := range values {
			delete(o.index[indexName][value], name)
			if len(o.index[indexName][value]) == 0 {
				delete(o.index[indexName], value)
			}
		}
	}
}

// indexValues are obj's values under each of the informer's index functions (an object whose
// index function fails is not indexed by it, as in the informer's cache).
func (o *overlay[T]) indexValues(obj T) map[string][]string {
	out := make(map[string][]string, len(o.indexers))
	for indexName, f := range o.indexers {
		if values, err := f(obj); err == nil {
			out[indexName] = values
		}
	}
	return out
}

// keyIndex indexes a view's cached objects by one value of each, in place of an index of the
// informer, which keeps a set of names (a Go map) for each value: about 300 bytes for a value
// of one object, such as a cluster Secret's server URL or cluster name, and 450 for the ten
// Applications of a cluster at ten rules (BenchmarkCachedCluster). A key index keeps one map
// entry for a value of one object, and a list of exactly its names for a value of several.
// Its users hold the view's lock.
type keyIndex[T kubeObject] struct {
	value func(T) string
	// one is value → the name of the one object that has it; more is value → the names of the
	// objects that have it, when there are several (those values are not in one). A list is
	// never changed in place: names returns it.
	one  map[string]string
	more map[string][]string
}

func newKeyIndex[T kubeObject](value func(T) string) *keyIndex[T] {
	return &keyIndex[T]{value: value, one: map[string]string{}, more: map[string][]string{}}
}

func (ix *keyIndex[T]) add(obj T) {
	value, name := ix.value(obj), obj.GetName()
	if value == "" {
		return
	}
	if names, ok := ix.more[value]; ok {
		if !slices.Contains(names, name) {
			grown := make([]string, len(names)+1) // exactly: a list is kept as long as its value
			copy(grown, names)
			grown[len(names)] = name
			ix.more[value] = grown
		}
		return
	}
	if other, ok := ix.one[value]; ok && other != name {
		delete(ix.one, value)
		ix.more[value] = []string{other, name}
		return
	}
	ix.one[value] = name
}

func (ix *keyIndex[T]) remove(obj T) {
	value, name := ix.value(obj), obj.GetName()
	if value == "" {
		return
	}
	if ix.one[value] == name {
		delete(ix.one, value)
		return
	}
	names := ix.more[value] // two or more
	i := slices.Index(names, name)
	switch {
	case i < 0:
	case len(names) == 2:
		delete(ix.more, value)
		ix.one[value] = names[1-i]
	default:
		ix.more[value] = slices.Concat(names[:i], names[i+1:])
	}
}

// names returns the names of the objects that have the value; the caller must not change the
// list (it may append to a clipped one).
func (ix *keyIndex[T]) names(value string) []string {
	if name, ok := ix.one[value]; ok {
		return []string{name}
	}
	return ix.more[value]
}

// keyedMutex serialises work per key.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	sync.RWMutex
	refs int
}

// lock locks key exclusively and returns its unlock function.
func (k *keyedMutex) lock(key string) func() {
	l := k.ref(key)
	l.Lock()
	return func() { l.Unlock(); k.unref(key, l) }
}

// rlock locks key shared with other rlock holders, and returns its unlock function.
func (k *keyedMutex) rlock(key string) func() {
	l := k.ref(key)
	l.RLock()
	return func() { l.RUnlock(); k.unref(key, l) }
}

func (k *keyedMutex) ref(key string) *keyLock {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyLock{}
		k.locks[key] = l
	}
	l.refs++
	return l
}

func (k *keyedMutex) unref(key string, l *keyLock) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l.refs--
	if l.refs == 0 {
		delete(k.locks, key)
	}
}

// clusterLocks order the work on one cluster. An install holds its cluster shared, so that the
// Applications of a new cluster (one a rule) are written side by side instead of one after the
// other; within it, the cluster's own objects (its Secret and AppProject, which its intents
// share) and each Application name are held exclusively for the moment they are read and
// written. Everything else (an uninstall and the unregistration it may end in, the resync's
// restores, a name-conflict check) holds the cluster exclusively: it sees no install half done,
// and an unregistration never removes a project that an Application being written relies on.
type clusterLocks struct {
	clusters keyedMutex // shared: installs; exclusive: the rest
	objects  keyedMutex // the cluster's Secret and AppProject, within a shared hold
	apps     keyedMutex // an Application name, within a shared hold
}

// lock holds the cluster exclusively.
func (c *clusterLocks) lock(cluster string) func() { return c.clusters.lock(cluster) }

// installing is a shared hold of one cluster by an install; its zero value stands for an
// exclusive hold, which needs nothing more.
type installing struct {
	locks *clusterLocks
}

// install holds the cluster shared, for an install.
func (c *clusterLocks) install(cluster string) (installing, func()) {
	return installing{locks: c}, c.clusters.rlock(cluster)
}

// objects holds the cluster's own objects, and application holds one Application name, for the
// rest of a shared hold's read-then-write; both return their unlock function.
func (h installing) objects(cluster string) func() {
	if h.locks == nil {
		return func() {}
	}
	return h.locks.objects.lock(cluster)
}

func (h installing) application(name string) func() {
	if h.locks == nil {
		return func() {}
	}
	return h.locks.apps.lock(name)
}

// repoQueue holds, per AppProject and cluster identity, the repositories that installs waiting
// for their cluster's objects want the project to allow. The install that writes the project
// takes them all: the Applications of a new cluster, one a rule, cost the project two writes or
// so instead of one each. Each install still adds its own repository itself, so an entry taken
// by a write that then fails is not lost. The identity keeps two clusters that share a name
// (one of them refused as a name conflict) from allowing each other's repositories.
type repoQueue struct {
	mu   sync.Mutex
	want map[repoQueueKey]map[string]int // repository → installs waiting with it
}

type repoQueueKey struct{ project, identity string }

// add queues repo for the project until done is called with the same arguments.
func (q *repoQueue) add(project, identity, repo string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := repoQueueKey{project, identity}
	if q.want == nil {
		q.want = map[repoQueueKey]map[string]int{}
	}
	if q.want[k] == nil {
		q.want[k] = map[string]int{}
	}
	q.want[k][repo]++
}

// done ends the wait of one install that queued repo for the project.
func (q *repoQueue) done(project, identity, repo string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := repoQueueKey{project, identity}
	if q.want[k][repo]--; q.want[k][repo] <= 0 {
		delete(q.want[k], repo)
	}
	if len(q.want[k]) == 0 {
		delete(q.want, k)
	}
}

// queued lists the repositories queued for the project.
func (q *repoQueue) queued(project, identity string) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Collect(maps.Keys(q.want[repoQueueKey{project, identity}]))
}

// trimForCache projects an object, before the informer caches it, on what argo-syncer reads of
// it: an Application on a cachedApplication, an AppProject on a cachedProject and a cluster
// Secret on a cachedSecret. None keeps the managed fields (every write is a server-side apply or
// a merge patch built from the desired state, never an update of a cached copy). Of an
// Application's status only the few facts applicationHealth reads are kept: the resource list,
// the history, the conditions and the sync result Argo CD keeps there grow with the
// Application's resources and syncs, and the Application type itself is a kilobyte before any of
// them. Of a cluster Secret's config (the credentials) only the digest is kept. A fleet's memory
// then grows with its clusters by what argo-syncer uses (BenchmarkCachedCluster).
//
// The overlay of argo-syncer's own writes keeps them in the same form (view.wrote).
//
// What it keeps, it stores once: the strings the objects of a fleet repeat (label and annotation
// keys and values, rule and cluster names, repositories, spec hashes) are interned.
func trimForCache(obj any) (any, error) {
	switch o := obj.(type) {
	case *argov1.Application:
		return cacheApplication(o), nil
	case *cachedApplication: // already trimmed: the transform may see an object twice
		return o, nil
	case *argov1.AppProject:
		return cacheProject(o), nil
	case *cachedProject:
		return o, nil
	case *corev1.Secret:
		return cacheSecret(o), nil
	case *cachedSecret:
		return o, nil
	}
	return obj, nil // no other kind is cached
}

// cachedProject is what argo-syncer keeps of an AppProject, in its cache and in the overlay of
// its own writes: the metadata it reads, the repositories it allows (ensureProject adds to them)
// and a digest of its spec. Its spec is kept whole only when the project is not Enforcement's
// (owned): adoption examines such a spec field by field (originalProject). Of its own projects
// argo-syncer needs to know whether the spec still is what it rendered, which the digest
// answers (projectInSync). argo-syncer never writes a cachedProject back.
type cachedProject struct {
	// cachedMeta is the part of the metadata argo-syncer reads: a cachedProject is a
	// metav1.Object (cachedmeta.go).
	cachedMeta
	// SourceRepos are spec.sourceRepos, interned.
	SourceRepos []string
	// SpecDigest is the digest of the spec's JSON (digestSpec).
	SpecDigest specDigest
	// Foreign is the spec of a project Enforcement does not own; nil for its own.
	Foreign *argov1.AppProjectSpec
}

// cacheProject projects p on what argo-syncer keeps of it; a foreign spec shares p's lists.
func cacheProject(p *argov1.AppProject) *cachedProject {
	c := &cachedProject{cachedMeta: newCachedMeta(&p.ObjectMeta), SpecDigest: digestSpec(p.Spec)}
	if len(p.Spec.SourceRepos) > 0 {
		c.SourceRepos = make([]string, len(p.Spec.SourceRepos))
		for i, r := range p.Spec.SourceRepos {
			c.SourceRepos[i] = intern(r)
		}
	}
	if !owned(c) {
		spec := p.Spec
		spec.SourceRepos = c.SourceRepos
		c.Foreign = &spec
	}
	return c
}

// cachedSecret is what argo-syncer keeps of a cluster Secret, in its cache and in the overlay of
// its own writes: the metadata it reads, and of the data how Argo CD knows the cluster and a
// digest of its config. The config's credentials (a token, a CA certificate: kilobytes a
// cluster) stay out of argo-syncer's memory; refreshedConfig, the one reader, compares digests.
// argo-syncer never writes a cachedSecret back.
type cachedSecret struct {
	// cachedMeta is the part of the metadata argo-syncer reads: a cachedSecret is a
	// metav1.Object (cachedmeta.go).
	cachedMeta
	// Server and ClusterName are data.server and data.name.
	Server, ClusterName string
	// ConfigDigest is the SHA-256 of data.config (configDigest); the zero digest when there is
	// none.
	ConfigDigest [sha256.Size]byte
}

// cacheSecret projects sec on what argo-syncer keeps of it.
func cacheSecret(sec *corev1.Secret) *cachedSecret {
	c := &cachedSecret{cachedMeta: newCachedMeta(&sec.ObjectMeta), Server: string(sec.Data["server"]),
		ClusterName: string(sec.Data["name"])}
	if config, ok := sec.Data["config"]; ok {
		c.ConfigDigest = configDigest(config)
	}
	return c
}

func configDigest(config []byte) [sha256.Size]byte { return sha256.Sum256(config) }

// cachedApplication is what argo-syncer keeps of an Application, in its cache and in the overlay
// of its own writes: the metadata (without managed fields), of the spec its project and a digest,
// and of Argo CD's status what applicationHealth reports. Its spec is kept whole only when the
// Application is not Enforcement's (owned): adoption examines such a spec field by field
// (originalApplication). Of its own Applications argo-syncer needs to know only whether the spec
// still is what it rendered, which the digest answers (applicationInSync). argo-syncer never
// writes a cachedApplication back.
type cachedApplication struct {
	// cachedMeta is the part of the metadata argo-syncer reads: a cachedApplication is a
	// metav1.Object (cachedmeta.go).
	cachedMeta
	// Project is the spec's AppProject.
	Project sharedString
	// SpecDigest is the digest of the spec's JSON (digestSpec).
	SpecDigest specDigest
	// Foreign is the spec of an Application Enforcement does not own; nil for its own.
	Foreign *argov1.ApplicationSpec
	// status is what argo-syncer reads of Argo CD's status (Status), one shared copy for all
	// the Applications that report the same: nearly all of a healthy fleet report Healthy,
	// Synced and the same message of the same operation.
	status unique.Handle[cachedApplicationStatus]
}

// cachedApplicationStatus is the part of an Application's status argo-syncer reads.
type cachedApplicationStatus struct {
	Health        string // health.HealthStatusCode
	HealthMessage string
	Sync          string // argov1.SyncStatusCode
	// Operation and OperationMessage are the phase (synccommon.OperationPhase) and message of
	// Argo CD's last operation, empty when there was none.
	Operation        string
	OperationMessage string
	// Observed: the source (or sources) and destination Argo CD last compared are the spec's
	// (observed).
	Observed bool
}

// Status is what argo-syncer reads of the Application's status.
func (c *cachedApplication) Status() cachedApplicationStatus { return c.status.Value() }

// cacheApplication projects app, which it may change, on what argo-syncer keeps of it.
func cacheApplication(app *argov1.Application) *cachedApplication {
	st := app.Status
	status := cachedApplicationStatus{Health: string(st.Health.Status), HealthMessage: st.Health.Message,
		Sync: string(st.Sync.Status), Observed: observed(app)}
	if op := st.OperationState; op != nil {
		status.Operation, status.OperationMessage = string(op.Phase), op.Message
	}
	c := &cachedApplication{cachedMeta: newCachedMeta(&app.ObjectMeta), Project: share(app.Spec.Project), SpecDigest: digestSpec(app.Spec),
		status: unique.Make(status)}
	if !owned(c) {
		spec := app.Spec
		internApplicationSpec(&spec)
		c.Foreign = &spec
	}
	return c
}

// specDigest is the SHA-256 of a spec's JSON, cut to 16 bytes: a collision between two specs an
// Application holds one after the other is out of reach.
type specDigest [16]byte

// digestSpec digests the JSON of an Application's spec. Two specs of the same Go type with the
// same digest are equal field for field, and the JSON encoding drops what the API server drops
// (the omitted empty fields), so the spec argo-syncer renders and the one the server returns
// after applying it have the same digest.
func digestSpec(spec any) specDigest {
	b, err := json.Marshal(spec)
	if err != nil {
		return specDigest{} // not comparable: the zero digest, which no spec's JSON has
	}
	sum := sha256.Sum256(b)
	return specDigest(sum[:16])
}

// intern returns the one shared copy of s.
func intern(s string) string { return unique.Make(s).Value() }

// sharedString holds the one shared copy of a string (intern) in 8 bytes, where a string takes
// 16: for the fields every cached Application has and most share. The zero sharedString is "".
type sharedString struct{ h unique.Handle[string] }

func share(s string) sharedString {
	if s == "" {
		return sharedString{}
	}
	return sharedString{unique.Make(s)}
}

func (s sharedString) String() string {
	if s == (sharedString{}) {
		return ""
	}
	return s.h.Value()
}

// internedValueLimit is the longest label or annotation value interned: names, references and
// hashes repeat across a fleet's objects, a long value (a kubectl last-applied configuration)
// is the object's own.
const internedValueLimit = 128

// internValue is the value v of key k, interned unless it is long or the object's own: the
// intent that created the object and the hash of what was applied. Interning a value only one
// object holds costs the intern table's entry on top of the string (BenchmarkCachedApplication:
// 1,334 live bytes an Application with the applied hash interned, 1,280 without).
func internValue(k, v string) string {
	if len(v) <= internedValueLimit && k != AnnotationCreatedBy && k != AnnotationAppliedHash {
		return intern(v)
	}
	return v
}

// metaStrings is a label or annotation map of a cached projection (cachedMeta), kept as its
// values in key order beside one shared copy of its keys. A Go map costs a group of eight slots (about 300
// bytes) even for one entry, and more than eight entries need a table of groups. The
// Applications of a fleet have a handful of key sets (one for each rule's labels and
// annotations), so a list of keys is shared and each Application keeps 16 bytes an entry, its
// values' string headers (the values themselves are interned: internValue).
// An Application's five labels and eight or nine annotations are read by key, a few times for
// each intent. A metaStrings is never changed in place.
type metaStrings struct {
	// keys holds the keys in order, each followed by a zero byte, which no label or annotation
	// key contains; unset when there are no entries.
	keys   unique.Handle[string]
	values []string
}

// keyEnd ends each key of a metaStrings' keys.
const keyEnd = 0

// newMetaStrings keeps m, its values interned (internValue); empty when m is.
func newMetaStrings(m map[string]string) metaStrings {
	if len(m) == 0 {
		return metaStrings{}
	}
	keys := slices.Sorted(maps.Keys(m))
	var joined strings.Builder
	values := make([]string, len(keys))
	for i, k := range keys {
		joined.WriteString(k)
		joined.WriteByte(keyEnd)
		values[i] = internValue(k, m[k])
	}
	return metaStrings{keys: unique.Make(joined.String()), values: values}
}

// all calls yield with each key and its value in key order until yield returns false.
func (s metaStrings) all(yield func(k, v string) bool) {
	if len(s.values) == 0 {
		return
	}
	keys := s.keys.Value()
	for _, v := range s.values {
		end := strings.IndexByte(keys, keyEnd)
		if !yield(keys[:end], v) {
			return
		}
		keys = keys[end+1:]
	}
}

// Lookup is the value of key k, and whether there is one.
func (s metaStrings) Lookup(k string) (value string, found bool) {
	s.all(func(key, v string) bool {
		if key < k {
			return true
		}
		value, found = v, key == k
		return false
	})
	if !found {
		return "", false
	}
	return value, true
}

// Get is the value of key k, "" when there is none (as a map's).
func (s metaStrings) Get(k string) string {
	v, _ := s.Lookup(k)
	return v
}

// Len is the number of entries.
func (s metaStrings) Len() int { return len(s.values) }

// Map is a map of the entries, the caller's own; nil when there are none.
func (s metaStrings) Map() map[string]string {
	if len(s.values) == 0 {
		return nil
	}
	m := make(map[string]string, len(s.values))
	s.all(func(k, v string) bool {
		m[k] = v
		return true
	})
	return m
}

func internApplicationSpec(spec *argov1.ApplicationSpec) {
	if src := spec.Source; src != nil {
		internSource(src)
	}
	for i := range spec.Sources {
		internSource(&spec.Sources[i])
	}
	d := &spec.Destination
	d.Server, d.Name, d.Namespace = intern(d.Server), intern(d.Name), intern(d.Namespace)
	spec.Project = intern(spec.Project)
	if p := spec.SyncPolicy; p != nil {
		for i, o := range p.SyncOptions {
			p.SyncOptions[i] = intern(o)
		}
	}
}

func internSource(src *argov1.ApplicationSource) {
	src.RepoURL, src.Path, src.TargetRevision, src.Chart = intern(src.RepoURL), intern(src.Path), intern(src.TargetRevision), intern(src.Chart)
	if h := src.Helm; h != nil {
		for i := range h.Parameters {
			p := &h.Parameters[i]
			p.Name, p.Value = intern(p.Name), intern(p.Value)
		}
	}
}
