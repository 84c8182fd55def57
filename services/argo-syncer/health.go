package main

// Application health. Argo CD's application controller writes into every Application's status
// its health (status.health), its sync status (status.sync) and the outcome of its last sync
// (status.operationState). rule-engine's staged rollouts (spec.rollout) wait for Healthy and
// Synced and halt on Degraded or a failed sync, so the leader reports what the controller writes,
// for the Applications argo-syncer owns, as ApplicationHealth events.
//
// The reporter reads the Application informer the syncer keeps anyway (in API mode too: its
// watch goes through the same client), queues Application names on every change, and publishes
// an event only when what the event says changes: a resync, or a write that changes nothing of
// it (argo-syncer's own labels, Argo CD's reconciledAt), publishes nothing. The queue holds each
// name once, however often the Application changes meanwhile, and a failed publish (NATS away) is
// retried with backoff, the latest state winning. A new leader knows nothing of what the last
// one published: it reports every owned Application once; rule-engine drops what it already had.
//
// One report is not sent: the first of an Application written for its pair's first decision
// (decisionStore.admit's first), while the status says nothing (Argo CD has not looked at it).
// No intent of the pair was acted on before, so no Application of it was reported on and
// rule-engine holds no health for it; a report that says nothing would change nothing there
// (rule-engine drops it too). A pair that had an Application before (deleted and created again,
// an uninstall then an install) still gets its empty report, which replaces the health of the
// earlier Application. The handler marks the Application before it writes it (quietStarts), so
// that the mark is there however soon the watch brings the Application.

import (
	"context"
	"hash/maphash"
	"strings"
	"sync"
	"time"

	argov1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	synccommon "github.com/argoproj/gitops-engine/pkg/sync/common"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// healthPublisher publishes ApplicationHealth events (the service's events.Publisher).
type healthPublisher interface {
	Publish(ctx context.Context, e events.Event) (events.PublishResult, error)
}

// ReportHealth publishes the health of the Applications argo-syncer owns until ctx ends. Call it
// on the leader only, after Run has synced the caches.
func (s *Syncer) ReportHealth(ctx context.Context, pub healthPublisher) error {
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](
		100*time.Millisecond, 30*time.Second))
	enqueue := func(obj any) {
		if app, ok := obj.(*cachedApplication); ok && owned(app) {
			queue.Add(app.Name)
		}
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			if app, ok := d.Obj.(*cachedApplication); ok {
				queue.Add(app.Name)
			}
		}
	}
	reg, err := s.apps.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	})
	if err != nil {
		return err
	}
	defer func() { _ = s.apps.informer.RemoveEventHandler(reg) }()
	go func() { <-ctx.Done(); queue.ShutDown() }()

	last := map[string]uint64{} // by Application name: healthFingerprint of the last report
	for {
		name, quit := queue.Get()
		if quit {
			return nil
		}
		err := s.reportHealth(ctx, pub, name, last)
		if err != nil && ctx.Err() == nil {
			s.logger.Warn("Retrying Application health report", "application", name, "error", err)
			queue.AddRateLimited(name)
		} else {
			queue.Forget(name)
		}
		queue.Done(name)
	}
}

// reportHealth publishes the Application's health when it differs from the last one published.
func (s *Syncer) reportHealth(ctx context.Context, pub healthPublisher, name string, last map[string]uint64) error {
	obj, exists, err := s.apps.informer.GetIndexer().GetByKey(s.ns + "/" + name)
	if err != nil {
		return err
	}
	app, ok := obj.(*cachedApplication)
	if !exists || !ok || !owned(app) {
		delete(last, name)
		s.quiet.take(name)
		return nil
	}
	ev, ok := applicationHealth(app)
	if !ok {
		s.logger.Debug("Application has no install intent's annotations; its health is not reported", "application", name)
		return nil
	}
	fingerprint := healthFingerprint(*ev)
	prev, seen := last[name]
	if seen && prev == fingerprint {
		return nil
	}
	if s.quiet.take(name) && !seen && saysNothing(ev) {
		last[name] = fingerprint // what rule-engine holds: nothing
		return nil
	}
	if _, err := pub.Publish(ctx, ev); err != nil {
		return err
	}
	last[name] = fingerprint
	s.metrics.healthPublished(ev.Health)
	return nil
}

// saysNothing reports whether ev reports no status at all: neither healthy nor failed, for no
// spec, as rule-engine reads it.
func saysNothing(ev *events.ApplicationHealth) bool {
	return !ev.Observed && ev.Health == "" && ev.Sync == "" && ev.Operation == "" && ev.Message == ""
}

// quietStarts holds the names of the Applications being written for their pair's first
// decision, until the reporter has seen them (see the top of this file). A name stays when its
// Application is never created (an install that waits for a trigger that fails); the handler
// drops it on a permanent failure and on an uninstall.
type quietStarts struct {
	mu    sync.Mutex
	names map[string]struct{}
}

func (q *quietStarts) add(name string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.names == nil {
		q.names = map[string]struct{}{}
	}
	q.names[name] = struct{}{}
}

// take reports whether name is held and lets go of it.
func (q *quietStarts) take(name string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.names[name]
	delete(q.names, name)
	return ok
}

// quietStart marks the Application of the cluster's enforcement as written for its pair's first
// decision; forgetQuietStart unmarks it.
func (s *Syncer) quietStart(cluster, enforcement string) {
	s.quiet.add(s.names(cluster, enforcement).application)
}

func (s *Syncer) forgetQuietStart(cluster, enforcement string) {
	s.quiet.take(s.names(cluster, enforcement).application)
}

// healthSeed seeds healthFingerprint for the process's life.
var healthSeed = maphash.MakeSeed()

// healthFingerprint identifies what a health report says, all of it but the resource version
// (a new version that reports the same is not reported again). The reporter keeps it per
// Application instead of the report itself, 8 bytes instead of about 250: two different
// reports share a fingerprint once in 2^64, when the later one would not be sent until the
// Application's health changes again.
func healthFingerprint(ev events.ApplicationHealth) uint64 {
	ev.ResourceVersion = ""
	return maphash.Comparable(healthSeed, ev)
}

// applicationHealth is the ApplicationHealth event of an Application an install intent wrote;
// false when the Application lacks the annotations that name its rule, cluster and enforcement.
func applicationHealth(app *cachedApplication) (*events.ApplicationHealth, bool) {
	a := app.Annotations
	ns, name, ok := strings.Cut(a.Get(AnnotationRule), "/")
	if !ok || ns == "" || name == "" || a.Get(AnnotationCluster) == "" || a.Get(AnnotationEnforcement) == "" {
		return nil, false
	}
	st := app.Status()
	ev := &events.ApplicationHealth{
		Rule:            events.RuleRef{Namespace: ns, Name: name, UID: a.Get(AnnotationRuleUID)},
		Cluster:         a.Get(AnnotationCluster),
		Identity:        a.Get(AnnotationIdentity),
		Enforcement:     a.Get(AnnotationEnforcement),
		Application:     app.Name,
		SpecHash:        a.Get(AnnotationSpecHash),
		Observed:        st.Observed,
		ResourceVersion: app.GetResourceVersion(),
		Health:          st.Health,
		Sync:            st.Sync,
		Message:         st.HealthMessage,
		Operation:       st.Operation,
	}
	if synccommon.OperationPhase(ev.Operation).Failed() && st.OperationMessage != "" {
		ev.Message = st.OperationMessage
	}
	return ev, true
}

// observed reports whether Argo CD's status describes the Application's current spec: the source
// (or sources) and destination its controller last compared are the spec's. Right after
// argo-syncer updates an Application the status is still the previous spec's.
func observed(app *argov1.Application) bool {
	want := app.Spec.BuildComparedToStatus()
	got := app.Status.Sync.ComparedTo
	// Argo CD's own comparisons: its destination keeps unexported inference flags.
	return want.Source.Equals(&got.Source) && want.Sources.Equals(got.Sources) && want.Destination.Equals(got.Destination)
}
