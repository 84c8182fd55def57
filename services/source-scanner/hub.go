package main

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/clusterprofile"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/ocm"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
)

// hubKind is what differs between the sources read from a Kubernetes API server (a hub): OCM
// ManagedClusters and Cluster Inventory ClusterProfiles. Both are listed directly, watched, and
// read their hub from the source Secret's kubeconfig key.
type hubKind struct {
	// what names the objects in messages ("ManagedClusters"); crd the group/version to install.
	what, crd string
	// prefix starts the identity of the kind's clusters, before the hub's host.
	prefix   string
	resource schema.GroupVersionResource
	// namespaces limit the watch (and the listing); empty: every namespace.
	namespaces []string
	// secret reads the source Secret: the hub's kubeconfig (nil: the in-cluster hub) and the
	// kind's settings. Its error names the key.
	secret func(data map[string][]byte) (kubeconfig []byte, settings any, err error)
	// list lists the hub with the settings; convert converts one object (to compare versions).
	list    func(ctx context.Context, hub client.Reader, settings any) ([]events.Cluster, error)
	convert func(obj *unstructured.Unstructured, settings any) events.Cluster
}

// ocmKind is the ocm source: a Secret, when it exists, must name a remote hub.
var ocmKind = hubKind{
	what: "ManagedClusters", crd: "cluster.open-cluster-management.io/v1", prefix: "ocm:",
	resource: schema.GroupVersionResource{Group: "cluster.open-cluster-management.io", Version: "v1", Resource: "managedclusters"},
	secret: func(data map[string][]byte) ([]byte, any, error) {
		creds, err := events.ParseOCMSecret(data)
		return creds.Kubeconfig, nil, err
	},
	list: func(ctx context.Context, hub client.Reader, _ any) ([]events.Cluster, error) {
		return (&ocm.Lister{Hub: hub}).List(ctx)
	},
	convert: func(obj *unstructured.Unstructured, _ any) events.Cluster { return ocm.Convert(obj) },
}

// clusterProfileKind is the clusterprofile source of namespaces: its Secret is optional and may
// hold a remote hub's kubeconfig, the access provider configuration, or both.
func clusterProfileKind(namespaces []string) hubKind {
	return hubKind{
		what: "ClusterProfiles", crd: "multicluster.x-k8s.io/v1alpha1", prefix: "clusterprofile:",
		resource:   clusterprofile.Resource,
		namespaces: events.NormaliseSourceList(namespaces),
		secret: func(data map[string][]byte) ([]byte, any, error) {
			p, err := clusterprofile.ParseProviders(data)
			return data[events.SecretKeyKubeconfig], p, err
		},
		list: func(ctx context.Context, hub client.Reader, settings any) ([]events.Cluster, error) {
			p, _ := settings.(clusterprofile.Providers)
			return (&clusterprofile.Lister{Hub: hub, Namespaces: namespaces, Providers: p}).List(ctx)
		},
		convert: func(obj *unstructured.Unstructured, settings any) events.Cluster {
			p, _ := settings.(clusterprofile.Providers)
			return clusterprofile.Convert(obj, p)
		},
	}
}

// hubLister lists the objects of one hub source and watches them, so that an object that is
// added, changed (in what the scanner publishes) or deleted triggers a scan of the source at
// once instead of at the next SCAN_INTERVAL (which stays as the resync).
//
// The hub is decided at every scan, from the source Secret: its `kubeconfig` key names a
// remote hub; without the Secret (and without a secretName in the rule), or without the key
// (clusterprofile), the hub is the service's own API server. When that choice changes, the old
// watch stops and a new one starts.
//
// The scan itself lists the hub directly rather than reading the watch's cache: a listing the
// API server answers whole is complete by construction, whereas a cache may lag or be unsynced,
// and the deletion rules must only ever see complete listings. The watch only says "look now".
type hubLister struct {
	kind    hubKind
	ref     events.SourceRef
	deps    listerDeps
	trigger func()

	mu          sync.Mutex
	fingerprint string        // of the hub the current client and watch belong to
	hub         client.Reader // lists the objects
	host        string        // the hub's API server, in its clusters' identity
	settings    any           // the kind's settings from the Secret
	stopWatch   context.CancelFunc
	closed      bool
}

func newHubLister(kind hubKind, ref events.SourceRef, d listerDeps) *hubLister {
	l := &hubLister{kind: kind, ref: ref, deps: d, trigger: func() {}}
	if d.trigger != nil {
		l.trigger = func() { d.trigger(ref.ID) }
	}
	return l
}

// List lists the hub's objects. Errors are DegradedErrors: SecretInvalid for a missing
// (explicitly named) or unusable Secret, Unauthorized when the hub refuses the credentials,
// ListFailed otherwise (including a hub without the kind's CRD).
func (l *hubLister) List(ctx context.Context) ([]events.Cluster, error) {
	hub, host, settings, err := l.prepare(ctx)
	if err != nil {
		return nil, err
	}
	clusters, err := l.kind.list(ctx, hub, settings)
	switch {
	case err == nil:
		stampIdentity(clusters, l.kind.prefix+host+"/")
		return clusters, nil
	case apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err):
		return nil, scanner.Degraded(events.DegradedUnauthorized, err)
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		return nil, scanner.Degradedf(events.DegradedListFailed, "the hub serves no %s (is the %s CRD installed?): %w", l.kind.what, l.kind.crd, err)
	default:
		return nil, scanner.Degraded(events.DegradedListFailed, err)
	}
}

// prepare reads the source Secret and returns the hub's reader, its API server address
// ("in-cluster" when unknown) and the kind's settings, (re)building the client and the watch
// when the hub changed.
func (l *hubLister) prepare(ctx context.Context) (client.Reader, string, any, error) {
	data, found, err := sourceSecret(ctx, l.deps.kube, l.ref)
	if err != nil {
		return nil, "", nil, err
	}
	var (
		kubeconfig []byte
		settings   any
	)
	if found {
		if kubeconfig, settings, err = l.kind.secret(data); err != nil {
			return nil, "", nil, scanner.Degradedf(events.DegradedSecretInvalid, "Secret %s/%s: %w", l.ref.SecretNamespace, l.ref.SecretName, err)
		}
	} else {
		_, settings, _ = l.kind.secret(nil)
	}
	fp := "in-cluster"
	if len(kubeconfig) > 0 {
		fp = events.OCMCredentials{Kubeconfig: kubeconfig}.Fingerprint()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// Settings change what convert publishes, not the hub: the watch's comparison reads them
	// under mu.
	l.settings = settings
	if l.hub != nil && fp == l.fingerprint {
		return l.hub, l.host, settings, nil
	}
	var (
		hub    client.Reader
		hubCfg *rest.Config
	)
	if len(kubeconfig) == 0 {
		hub, hubCfg = l.deps.kube, l.deps.kubeCfg
	} else {
		hubCfg, err = ocm.HubConfig(events.OCMCredentials{Kubeconfig: kubeconfig})
		if err != nil {
			return nil, "", nil, scanner.Degradedf(events.DegradedSecretInvalid, "Secret %s/%s: %w", l.ref.SecretNamespace, l.ref.SecretName, err)
		}
		c, err := client.New(hubCfg, client.Options{})
		if err != nil {
			return nil, "", nil, scanner.Degradedf(events.DegradedSecretInvalid, "Secret %s/%s: hub client: %w", l.ref.SecretNamespace, l.ref.SecretName, err)
		}
		hub = c
	}
	if l.stopWatch != nil {
		l.stopWatch()
		l.stopWatch = nil
	}
	if !l.closed && hubCfg != nil && l.deps.watchCtx != nil {
		stop, err := l.watch(hubCfg)
		if err != nil {
			// Not fatal: the source is still scanned every SCAN_INTERVAL.
			l.logger().Warn("Could not watch "+l.kind.what+"; scanning every interval only", "source", l.ref.ID, "error", err)
		}
		l.stopWatch = stop
	}
	l.host = "in-cluster"
	if hubCfg != nil && hubCfg.Host != "" {
		l.host = strings.TrimSuffix(hubCfg.Host, "/")
	}
	l.hub, l.fingerprint = hub, fp
	return hub, l.host, settings, nil
}

func (l *hubLister) logger() *slog.Logger {
	if l.deps.logger != nil {
		return l.deps.logger
	}
	return slog.New(slog.DiscardHandler)
}

// watch starts an informer on the hub's objects that triggers a scan on every add, relevant
// update and delete, and once when it has synced (which covers changes between the scan that
// started it and its initial list). An update that changes nothing the scanner publishes (the
// kind's convert of both versions is equal: e.g. only a ManagedCluster's status.allocatable
// moved) triggers nothing. With exactly one namespace the watch is limited to it; with several
// it watches all and ignores the others' objects.
func (l *hubLister) watch(cfg *rest.Config) (context.CancelFunc, error) {
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(l.deps.watchCtx)
	namespace := metav1.NamespaceAll
	if len(l.kind.namespaces) == 1 {
		namespace = l.kind.namespaces[0]
	}
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dc, 0, namespace, nil)
	inf := factory.ForResource(l.kind.resource).Informer()
	log := l.logger()
	if err := inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			log.Warn("Watch of "+l.kind.what+" failed; retrying", "source", l.ref.ID, "error", err)
		}
	}); err != nil {
		cancel()
		return nil, err
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			if !isInInitialList && l.inScope(obj) {
				l.trigger()
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			if l.inScope(newObj) && l.changed(oldObj, newObj) {
				l.trigger()
			}
		},
		DeleteFunc: func(obj any) {
			if l.inScope(obj) {
				l.trigger()
			}
		},
	}); err != nil {
		cancel()
		return nil, err
	}
	go inf.Run(ctx.Done())
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			log.Debug("Watching "+l.kind.what, "source", l.ref.ID, "host", cfg.Host)
			l.trigger()
		}
	}()
	return cancel, nil
}

// inScope reports whether a watched object is in the source's namespaces. A deletion's
// tombstone, whose object is unknown, is in scope.
func (l *hubLister) inScope(obj any) bool {
	if len(l.kind.namespaces) <= 1 {
		return true
	}
	o, ok := obj.(*unstructured.Unstructured)
	return !ok || slices.Contains(l.kind.namespaces, o.GetNamespace())
}

// changed reports whether two versions of an object differ in what the scanner publishes.
func (l *hubLister) changed(oldObj, newObj any) bool {
	o, ok1 := oldObj.(*unstructured.Unstructured)
	n, ok2 := newObj.(*unstructured.Unstructured)
	if !ok1 || !ok2 {
		return true
	}
	if o.GetResourceVersion() == n.GetResourceVersion() {
		return false // a resync or relist replay
	}
	l.mu.Lock()
	settings := l.settings
	l.mu.Unlock()
	return !reflect.DeepEqual(l.kind.convert(o, settings), l.kind.convert(n, settings))
}

// Close stops the watch.
func (l *hubLister) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.stopWatch != nil {
		l.stopWatch()
		l.stopWatch = nil
	}
}
