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
	"strconv"
	"sync"

	argov1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// kubeObject is what a view holds: a typed API object.
type kubeObject interface {
	metav1.Object
	runtime.Object
}

// tombstone remembers an object argo-syncer deleted. A terminating one (a finalizer delays its
// removal) still exists and must not be recreated or updated until it is gone.
type tombstone struct {
	uid         types.UID
	terminating bool
}

// view is one informer plus argo-syncer's own recent writes and deletions.
type view[T kubeObject] struct {
	ns       string
	informer cache.SharedIndexInformer
	// onDelete, if set, is called with every object the informer sees deleted.
	onDelete func(T)

	mu      sync.Mutex
	written map[string]T
	gone    map[string]tombstone
}

func newView[T kubeObject](ns string, informer cache.SharedIndexInformer) *view[T] {
	v := &view[T]{ns: ns, informer: informer, written: map[string]T{}, gone: map[string]tombstone{}}
	// Before the informer starts, so it never fails.
	_ = informer.SetTransform(trimForCache)
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { v.seen(obj) },
		UpdateFunc: func(_, obj any) { v.seen(obj) },
		DeleteFunc: v.deleted,
	})
	return v
}

// seen drops the overlay entry once the informer holds the written version or a newer one.
func (v *view[T]) seen(obj any) {
	o, ok := obj.(T)
	if !ok {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if w, ok := v.written[o.GetName()]; ok && !newer(w, o) {
		delete(v.written, o.GetName())
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
	v.mu.Lock()
	if t, ok := v.gone[o.GetName()]; ok && t.uid == o.GetUID() {
		delete(v.gone, o.GetName())
	}
	if w, ok := v.written[o.GetName()]; ok && w.GetUID() == o.GetUID() {
		delete(v.written, o.GetName())
	}
	v.mu.Unlock()
	if v.onDelete != nil {
		v.onDelete(o)
	}
}

// newer reports whether a is a later version of the same object than b (resource versions are
// etcd revisions; an unparsable one counts as newer, so argo-syncer's own write wins).
func newer(a, b metav1.Object) bool {
	if a.GetUID() != b.GetUID() {
		return true
	}
	ra, errA := strconv.ParseUint(a.GetResourceVersion(), 10, 64)
	rb, errB := strconv.ParseUint(b.GetResourceVersion(), 10, 64)
	if errA != nil || errB != nil {
		return a.GetResourceVersion() != b.GetResourceVersion()
	}
	return ra > rb
}

// get returns the freshest known version of the named object. ok is false when it does not
// exist (or argo-syncer deleted it without a finalizer); terminating is true while it is being
// deleted.
func (v *view[T]) get(name string) (obj T, ok, terminating bool) {
	var zero T
	cached, exists, _ := v.informer.GetIndexer().GetByKey(v.ns + "/" + name)
	v.mu.Lock()
	defer v.mu.Unlock()
	if exists {
		obj, ok = cached.(T)
	}
	if w, found := v.written[name]; found && (!ok || newer(w, obj)) {
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
	items, _ := v.informer.GetIndexer().ByIndex(indexName, value)
	seen := map[string]bool{}
	var out []T
	for _, item := range items {
		o, ok := item.(T)
		if !ok {
			continue
		}
		seen[o.GetName()] = true
		if latest, exists, _ := v.get(o.GetName()); exists {
			out = append(out, latest)
		}
	}
	// Objects written but not cached yet.
	indexFunc := v.informer.GetIndexer().GetIndexers()[indexName]
	v.mu.Lock()
	var extra []T
	for name, w := range v.written {
		if seen[name] || indexFunc == nil {
			continue
		}
		if values, err := indexFunc(w); err == nil && contains(values, value) {
			extra = append(extra, w)
		}
	}
	v.mu.Unlock()
	for _, w := range extra {
		if latest, exists, _ := v.get(w.GetName()); exists {
			out = append(out, latest)
		}
	}
	return out
}

func contains(values []string, v string) bool {
	for _, x := range values {
		if x == v {
			return true
		}
	}
	return false
}

// wrote records an object returned by a write.
func (v *view[T]) wrote(obj T) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.written[obj.GetName()] = obj
	if t, ok := v.gone[obj.GetName()]; ok && t.uid != obj.GetUID() {
		delete(v.gone, obj.GetName())
	}
}

// removed records that argo-syncer deleted the object with this uid.
func (v *view[T]) removed(name string, uid types.UID, terminating bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.gone[name] = tombstone{uid: uid, terminating: terminating}
	if w, ok := v.written[name]; ok && w.GetUID() == uid {
		delete(v.written, name)
	}
}

// keyedMutex serialises work per key (a cluster): intents of different rules for one cluster
// share its Secret and AppProject.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	sync.Mutex
	refs int
}

// lock locks key and returns its unlock function.
func (k *keyedMutex) lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyLock{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

// trimForCache drops from an object, before the informer caches it, what argo-syncer never reads:
// the managed fields (every write is a server-side apply or a merge patch built from the desired
// state, never an update of a cached copy) and, of an Application, the parts of Argo CD's status
// other than the health, the sync status with what it compared, and the operation's phase and
// message (applicationHealth). The resource list, the history, the conditions and the sync
// result Argo CD keeps there grow with the Application's resources and syncs, once per
// Application in memory. A fleet's memory then grows with its clusters by what argo-syncer uses.
func trimForCache(obj any) (any, error) {
	if o, ok := obj.(metav1.Object); ok {
		o.SetManagedFields(nil)
	}
	if app, ok := obj.(*argov1.Application); ok {
		st := argov1.ApplicationStatus{Health: app.Status.Health, Sync: app.Status.Sync}
		if op := app.Status.OperationState; op != nil {
			st.OperationState = &argov1.OperationState{Phase: op.Phase, Message: op.Message}
		}
		app.Status = st
	}
	return obj, nil
}
