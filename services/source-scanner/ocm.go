package main

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/ocm"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
)

// managedClusters is the resource the OCM source lists and watches.
var managedClusters = schema.GroupVersionResource{Group: "cluster.open-cluster-management.io", Version: "v1", Resource: "managedclusters"}

// ocmLister lists the ManagedClusters of one OCM source's hub and watches them, so that a
// ManagedCluster that is added, changed (labels, spec, claims, conditions) or deleted triggers a
// scan of the source at once instead of at the next SCAN_INTERVAL (which stays as the resync).
//
// The hub is decided at every scan, from the source Secret: its `kubeconfig` key names a
// remote hub; without the Secret (and without a secretName in the rule) the hub is the
// service's own API server. When that choice changes, the old watch stops and a new one starts.
//
// The scan itself lists the hub directly rather than reading the watch's cache: a listing the
// API server answers whole is complete by construction, whereas a cache may lag or be unsynced,
// and the deletion rules must only ever see complete listings. The watch only says "look now".
type ocmLister struct {
	ref     events.SourceRef
	deps    listerDeps
	trigger func()

	mu          sync.Mutex
	fingerprint string        // of the hub the current client and watch belong to
	hub         client.Reader // lists ManagedClusters
	host        string        // the hub's API server, in its clusters' identity
	stopWatch   context.CancelFunc
	closed      bool
}

func newOCMLister(ref events.SourceRef, d listerDeps) *ocmLister {
	l := &ocmLister{ref: ref, deps: d, trigger: func() {}}
	if d.trigger != nil {
		l.trigger = func() { d.trigger(ref.ID) }
	}
	return l
}

// List lists the hub's ManagedClusters. Errors are DegradedErrors: SecretInvalid for a missing
// (explicitly named) or unusable Secret, Unauthorized when the hub refuses the credentials,
// ListFailed otherwise (including a hub without the ManagedCluster CRD).
func (l *ocmLister) List(ctx context.Context) ([]events.Cluster, error) {
	hub, host, err := l.prepare(ctx)
	if err != nil {
		return nil, err
	}
	clusters, err := (&ocm.Lister{Hub: hub}).List(ctx)
	switch {
	case err == nil:
		stampIdentity(clusters, "ocm:"+host+"/")
		return clusters, nil
	case apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err):
		return nil, scanner.Degraded(events.DegradedUnauthorized, err)
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		return nil, scanner.Degradedf(events.DegradedListFailed, "the hub serves no ManagedClusters (is the cluster.open-cluster-management.io/v1 CRD installed?): %w", err)
	default:
		return nil, scanner.Degraded(events.DegradedListFailed, err)
	}
}

// prepare reads the source Secret and returns the hub's reader and API server address ("in-cluster"
// when unknown), (re)building the client and the watch when the hub changed.
func (l *ocmLister) prepare(ctx context.Context) (client.Reader, string, error) {
	data, found, err := sourceSecret(ctx, l.deps.kube, l.ref)
	if err != nil {
		return nil, "", err
	}
	var creds events.OCMCredentials
	fp := "in-cluster"
	if found {
		if creds, err = events.ParseOCMSecret(data); err != nil {
			return nil, "", scanner.Degradedf(events.DegradedSecretInvalid, "Secret %s/%s: %w", l.ref.SecretNamespace, l.ref.SecretName, err)
		}
		fp = creds.Fingerprint()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.hub != nil && fp == l.fingerprint {
		return l.hub, l.host, nil
	}
	var (
		hub    client.Reader
		hubCfg *rest.Config
	)
	if !found {
		hub, hubCfg = l.deps.kube, l.deps.kubeCfg
	} else {
		hubCfg, err = ocm.HubConfig(creds)
		if err != nil {
			return nil, "", scanner.Degradedf(events.DegradedSecretInvalid, "Secret %s/%s: %w", l.ref.SecretNamespace, l.ref.SecretName, err)
		}
		c, err := client.New(hubCfg, client.Options{})
		if err != nil {
			return nil, "", scanner.Degradedf(events.DegradedSecretInvalid, "Secret %s/%s: hub client: %w", l.ref.SecretNamespace, l.ref.SecretName, err)
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
			l.logger().Warn("Could not watch ManagedClusters; scanning every interval only", "source", l.ref.ID, "error", err)
		}
		l.stopWatch = stop
	}
	l.host = "in-cluster"
	if hubCfg != nil && hubCfg.Host != "" {
		l.host = strings.TrimSuffix(hubCfg.Host, "/")
	}
	l.hub, l.fingerprint = hub, fp
	return hub, l.host, nil
}

func (l *ocmLister) logger() *slog.Logger {
	if l.deps.logger != nil {
		return l.deps.logger
	}
	return slog.New(slog.DiscardHandler)
}

// watch starts an informer on the hub's ManagedClusters that triggers a scan on every add,
// relevant update and delete, and once when it has synced (which covers changes between the
// scan that started it and its initial list). An update that changes nothing the scanner
// publishes (ocm.Convert of both versions is equal: e.g. only status.allocatable moved) triggers
// nothing.
func (l *ocmLister) watch(cfg *rest.Config) (context.CancelFunc, error) {
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(l.deps.watchCtx)
	factory := dynamicinformer.NewDynamicSharedInformerFactory(dc, 0)
	inf := factory.ForResource(managedClusters).Informer()
	log := l.logger()
	if err := inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			log.Warn("Watch of ManagedClusters failed; retrying", "source", l.ref.ID, "error", err)
		}
	}); err != nil {
		cancel()
		return nil, err
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(_ any, isInInitialList bool) {
			if !isInInitialList {
				l.trigger()
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			if clusterChanged(oldObj, newObj) {
				l.trigger()
			}
		},
		DeleteFunc: func(any) { l.trigger() },
	}); err != nil {
		cancel()
		return nil, err
	}
	go inf.Run(ctx.Done())
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			log.Debug("Watching ManagedClusters", "source", l.ref.ID, "host", cfg.Host)
			l.trigger()
		}
	}()
	return cancel, nil
}

// clusterChanged reports whether two versions of a ManagedCluster differ in what the scanner
// publishes.
func clusterChanged(oldObj, newObj any) bool {
	o, ok1 := oldObj.(*unstructured.Unstructured)
	n, ok2 := newObj.(*unstructured.Unstructured)
	if !ok1 || !ok2 {
		return true
	}
	if o.GetResourceVersion() == n.GetResourceVersion() {
		return false // a resync or relist replay
	}
	return !reflect.DeepEqual(ocm.Convert(o), ocm.Convert(n))
}

// Close stops the watch.
func (l *ocmLister) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.stopWatch != nil {
		l.stopWatch()
		l.stopWatch = nil
	}
}
