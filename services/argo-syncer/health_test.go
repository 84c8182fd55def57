package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	argov1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	healthlib "github.com/argoproj/gitops-engine/pkg/health"
	synccommon "github.com/argoproj/gitops-engine/pkg/sync/common"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// recordingHealthPublisher publishes through the real publisher and keeps what went out; while
// failing is set, every publish fails as it would with NATS away.
type recordingHealthPublisher struct {
	pub *events.Publisher

	mu        sync.Mutex
	failing   bool
	attempts  int
	published []*events.ApplicationHealth
}

func (p *recordingHealthPublisher) Publish(ctx context.Context, e events.Event) (events.PublishResult, error) {
	p.mu.Lock()
	p.attempts++
	failing := p.failing
	p.mu.Unlock()
	if failing {
		return events.PublishResult{}, errors.New("nats: no responders available for request")
	}
	r, err := p.pub.Publish(ctx, e)
	if err == nil {
		p.mu.Lock()
		p.published = append(p.published, e.(*events.ApplicationHealth))
		p.mu.Unlock()
	}
	return r, err
}

func (p *recordingHealthPublisher) fail(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failing = on
}

func (p *recordingHealthPublisher) count() (published, attempts int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.published), p.attempts
}

// waitNext waits for the n-th published report (counting from 1) and returns it.
func (p *recordingHealthPublisher) waitNext(t *testing.T, n int) *events.ApplicationHealth {
	t.Helper()
	testenv.EventuallyTrue(t, 10*time.Second, fmt.Sprintf("health report %d", n), func() bool {
		got, _ := p.count()
		return got >= n
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.published) > n {
		t.Fatalf("%d health reports, want %d: %+v", len(p.published), n, p.published[n])
	}
	return p.published[n-1]
}

// reportHealth runs the syncer's health reporter until the test ends, publishing through a
// recordingHealthPublisher.
func (h *harness) reportHealth() *recordingHealthPublisher {
	h.t.Helper()
	pub := &recordingHealthPublisher{pub: h.pub}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.syncer.ReportHealth(ctx, pub) }()
	h.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			h.t.Errorf("ReportHealth: %v", err)
		}
	})
	return pub
}

// setStatus writes the Application's status as Argo CD's application controller does (the
// Application CRD has no status subresource: an update of the whole object).
func (h *harness) setStatus(name string, mutate func(app *argov1.Application)) {
	h.t.Helper()
	apps := h.argo.ArgoprojV1alpha1().Applications(h.ns)
	testenv.Eventually(h.t, 10*time.Second, func() error {
		app, err := apps.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(app)
		_, err = apps.Update(context.Background(), app, metav1.UpdateOptions{})
		return err
	})
}

// argoStatus is a status as Argo CD writes it: compared against spec (the Application's own,
// or another), with a health, a sync status and the phase of the last sync operation.
func argoStatus(spec argov1.ApplicationSpec, health, sync string, phase, message string) argov1.ApplicationStatus {
	st := argov1.ApplicationStatus{
		Health: argov1.HealthStatus{Status: healthlib.HealthStatusCode(health)},
		Sync:   argov1.SyncStatus{Status: argov1.SyncStatusCode(sync), ComparedTo: spec.BuildComparedToStatus()},
	}
	if phase != "" {
		st.OperationState = &argov1.OperationState{Phase: synccommon.OperationPhase(phase), Message: message, StartedAt: metav1.Now()}
	}
	if health == events.HealthDegraded {
		st.Health.Message = "Deployment agent exceeded its progress deadline"
	}
	return st
}

// TestHealthReportedAsArgoCDWritesIt: the leader's reporter publishes what Argo CD's controller
// writes into an owned Application, Observed only once the status compares the current spec, a
// Degraded health with its failed sync, nothing for a write that changes none of it, and a
// report that failed to publish once NATS is back.
func TestHealthReportedAsArgoCDWritesIt(t *testing.T) {
	h := newHarness(t)
	reg := prometheus.NewRegistry()
	h.syncer.metrics = NewMetrics(reg)
	h.consume()
	in := h.installIntent("agent", "edge-1", "agent")
	h.publish(in)
	app := h.outcome(succeeded(in.ID())).(*events.InstallSucceeded).Application

	pub := h.reportHealth()

	// Created for its pair's first decision, not compared yet: rule-engine holds no health for
	// the pair, and a report that says nothing is not sent.
	eventually(t, "the reporter has seen the new Application", func() bool { return !h.syncer.quiet.holds(app) })
	if n, _ := pub.count(); n != 0 {
		t.Fatalf("%d reports of a new Application Argo CD has not looked at, want none: %+v", n, pub.published)
	}

	// The status of the previous spec (another path): not observed.
	h.setStatus(app, func(a *argov1.Application) {
		old := a.Spec.DeepCopy()
		old.Source.Path = "charts/previous"
		a.Status = argoStatus(*old, events.HealthHealthy, events.SyncSynced, "Succeeded", "")
	})
	if r := pub.waitNext(t, 1); r.Observed || r.Health != events.HealthHealthy || r.Application != app || r.Cluster != "edge-1" ||
		r.Enforcement != "agent" || r.SpecHash != in.SpecHash || r.Rule.String() != in.Rule.String() || r.Rule.UID != in.Rule.UID {
		t.Fatalf("a status of the previous spec reported %+v, want Healthy and not observed, of the intent's pair and spec", r)
	}

	// Argo CD compares the current spec: Progressing, then Healthy and Synced.
	h.setStatus(app, func(a *argov1.Application) {
		a.Status = argoStatus(a.Spec, events.HealthProgressing, events.SyncOutOfSync, "Running", "")
	})
	if r := pub.waitNext(t, 2); !r.Observed || r.Health != events.HealthProgressing || r.Sync != events.SyncOutOfSync || r.Operation != "Running" {
		t.Fatalf("report %+v, want observed Progressing, OutOfSync, Running", r)
	}
	h.setStatus(app, func(a *argov1.Application) {
		a.Status = argoStatus(a.Spec, events.HealthHealthy, events.SyncSynced, "Succeeded", "")
	})
	if r := pub.waitNext(t, 3); !r.Observed || r.Health != events.HealthHealthy || r.Sync != events.SyncSynced || r.Operation != "Succeeded" {
		t.Fatalf("report %+v, want observed Healthy, Synced, Succeeded", r)
	}

	// A write that changes nothing the report says (a label, Argo CD's reconciledAt): nothing.
	h.setStatus(app, func(a *argov1.Application) {
		a.Labels["team"] = "edge"
		now := metav1.Now()
		a.Status.ReconciledAt = &now
	})
	time.Sleep(time.Second)
	if n, _ := pub.count(); n != 3 {
		t.Fatalf("%d reports after a write that changed nothing reported, want 3", n)
	}

	// Degraded after a failed sync: the operation's message names the failure.
	h.setStatus(app, func(a *argov1.Application) {
		a.Status = argoStatus(a.Spec, events.HealthDegraded, events.SyncSynced, "Failed", "one or more objects failed to apply")
	})
	if r := pub.waitNext(t, 4); r.Health != events.HealthDegraded || r.Operation != events.OperationFailed ||
		r.Message != "one or more objects failed to apply" || !r.Observed {
		t.Fatalf("report %+v, want Degraded, Failed, with the operation's message", r)
	}

	// NATS away: the report is retried, and goes out once publishing works again.
	pub.fail(true)
	h.setStatus(app, func(a *argov1.Application) {
		a.Status = argoStatus(a.Spec, events.HealthHealthy, events.SyncSynced, "Succeeded", "")
	})
	testenv.EventuallyTrue(t, 10*time.Second, "two failed attempts", func() bool {
		n, attempts := pub.count()
		return n == 4 && attempts >= 6
	})
	pub.fail(false)
	if r := pub.waitNext(t, 5); r.Health != events.HealthHealthy || !r.Observed {
		t.Fatalf("report after the retry %+v, want Healthy", r)
	}
	if got := testutil.ToFloat64(h.syncer.metrics.health.WithLabelValues(events.HealthHealthy)); got != 3 {
		t.Errorf("application_health_published_total{health=Healthy} = %v, want 3", got)
	}
}

// TestEmptyReportOfAnApplicationCreatedAgain: the Application of a pair that had one before is
// reported as soon as it is created again, before Argo CD looks at it, since its empty report
// replaces the health rule-engine holds of the earlier one; an Application written for its
// pair's first decision is not.
func TestEmptyReportOfAnApplicationCreatedAgain(t *testing.T) {
	h := newHarness(t)
	h.consume()
	pub := h.reportHealth()

	in := h.installIntent("agent", "edge-1", "agent")
	h.publish(in)
	app := h.outcome(succeeded(in.ID())).(*events.InstallSucceeded).Application
	eventually(t, "the reporter has seen the new Application", func() bool { return !h.syncer.quiet.holds(app) })
	h.setStatus(app, func(a *argov1.Application) {
		a.Status = argoStatus(a.Spec, events.HealthHealthy, events.SyncSynced, "Succeeded", "")
	})
	if r := pub.waitNext(t, 1); !r.Observed || r.Health != events.HealthHealthy || r.SpecHash != in.SpecHash {
		t.Fatalf("report %+v, want observed Healthy of spec %s", r, in.SpecHash)
	}

	un := uninstallIntent(in, events.UninstallNoLongerMatches)
	h.publish(un)
	h.outcome(uninstalled(un.ID()))
	eventually(t, "the Application is gone", func() bool { return h.app(app) == nil })

	again := h.installIntent("agent", "edge-1", "agent")
	again.Rule.Generation++
	h.publish(again)
	h.outcome(succeeded(again.ID()))
	r := pub.waitNext(t, 2)
	if !saysNothing(r) || r.Application != app || r.SpecHash != again.SpecHash {
		t.Fatalf("report of the Application created again %+v, want one that says nothing, of %s", r, app)
	}
}

// holds reports whether the Application name is marked as written for its pair's first decision.
func (q *quietStarts) holds(name string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.names[name]
	return ok
}

// An Application without the annotations an install intent writes (adopted by hand, a foreign
// tool's) is not reported.
func TestHealthOfApplicationsWithoutIntentAnnotationsIsNotReported(t *testing.T) {
	app := &cachedApplication{cachedMeta: cachedMeta{Name: "x"}}
	app.SetLabels(map[string]string{LabelManagedBy: ManagedByValue})
	app.SetAnnotations(map[string]string{AnnotationRule: "no-namespace", AnnotationCluster: "c", AnnotationEnforcement: "e"})
	if ev, ok := applicationHealth(app); ok {
		t.Fatalf("reported %+v for a rule annotation without a namespace", ev)
	}
	app.SetAnnotations(map[string]string{AnnotationRule: "team/agent", AnnotationEnforcement: "e"})
	if ev, ok := applicationHealth(app); ok {
		t.Fatalf("reported %+v without a cluster annotation", ev)
	}
}
