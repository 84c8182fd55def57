package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
)

// TestReleaseRemovals runs the service against the real API server and NATS with two trips of
// one static source's breaker held at once, trip N (edge-5, edge-6) and trip M (edge-3, edge-4),
// and a rule of the source in a tenant namespace and one in OPERATOR_NAMESPACE. The tenant
// rule's annotation naming N (its author gets a ReleaseIgnored Event), and the operator rule's
// naming a trip that has not happened, release nothing; the operator rule's naming N releases N and leaves M held; the removals
// released event (what `enforcement release-removals` publishes) releases M.
func TestReleaseRemovals(t *testing.T) {
	e := newServiceEnv(t, "release")
	ctx := context.Background()
	s, k := e.s, e.k
	static := v1beta1.Source{Static: &v1beta1.StaticSource{}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "enforcement-static-clusters"}}
	setClusters := func(n int) {
		var b strings.Builder
		for i := 1; i <= n; i++ {
			fmt.Fprintf(&b, "- {name: edge-%d, url: \"https://edge-%d:6443\"}\n", i, i)
		}
		cm.Data = map[string]string{"clusters.yaml": b.String()}
		if cm.ResourceVersion == "" {
			e.must(k.Create(ctx, cm))
			return
		}
		e.must(k.Update(ctx, cm))
	}
	setClusters(6)
	e.rule("tenant", static)
	e.must(k.Create(ctx, rule(e.ns, "ops", static)))
	annotate := func(ns, name, value string) {
		var r v1beta1.ClusterRule
		e.must(k.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &r))
		r.Annotations = map[string]string{scanner.ReleaseAnnotation: value}
		e.must(k.Update(ctx, &r))
	}
	// trip waits for the RemovalsHeld event holding n clusters and returns the first one: its
	// scan is the trip.
	trip := func(n int) *events.SourceDegraded {
		var first *events.SourceDegraded
		testenv.EventuallyTrue(t, 20*time.Second, fmt.Sprintf("removals of %d clusters held", n), func() bool {
			s.poll()
			s.mu.Lock()
			defer s.mu.Unlock()
			for _, h := range s.held {
				if len(h.HeldRemovals) == n {
					first = h
					return true
				}
			}
			return false
		})
		return first
	}
	// scans waits for n more RemovalsHeld events (one per scan) and returns the last.
	scans := func(n int) *events.SourceDegraded {
		s.poll()
		s.mu.Lock()
		from := len(s.held)
		s.mu.Unlock()
		var last *events.SourceDegraded
		testenv.EventuallyTrue(t, 20*time.Second, fmt.Sprintf("%d more scans", n), func() bool {
			s.poll()
			s.mu.Lock()
			defer s.mu.Unlock()
			last = s.held[len(s.held)-1]
			return len(s.held) >= from+n
		})
		return last
	}
	noneGone := func(names ...string) {
		t.Helper()
		for _, n := range names {
			if s.count("gone static "+n) != 0 {
				t.Fatalf("%s is gone: %q", n, s.poll())
			}
		}
	}

	e.start()
	s.waitFor("appeared static edge-1", "appeared static edge-6")
	setClusters(4) // two of six vanish; the cap is one
	n := trip(2)
	setClusters(2)
	m := trip(4)
	id := n.Source.ID
	for _, want := range []string{
		fmt.Sprintf("trip %d holds 2 (edge-5, edge-6); trip %d holds 2 (edge-3, edge-4)", n.Scan, m.Scan),
		fmt.Sprintf("in namespace %s that uses this source with %s=%s", e.ns, scanner.ReleaseAnnotation, scanner.ReleaseValue(id, n.Scan)),
		fmt.Sprintf("enforcement release-removals %s %d", id, n.Scan),
	} {
		if !strings.Contains(m.Message, want) {
			t.Fatalf("RemovalsHeld message %q does not say %q", m.Message, want)
		}
	}

	// A tenant's rule naming N, and the operator's naming a trip still to come: nothing goes.
	annotate(e.rulesNS, "tenant", scanner.ReleaseValue(id, n.Scan))
	annotate(e.ns, "ops", scanner.ReleaseValue(id, m.Scan+1000))
	scans(5)
	noneGone("edge-3", "edge-4", "edge-5", "edge-6")
	// The tenant sees why on its rule (kubectl describe).
	testenv.EventuallyTrue(t, 10*time.Second, "a ReleaseIgnored Event on the tenant's rule", func() bool {
		var evs corev1.EventList
		e.must(k.List(ctx, &evs, client.InNamespace(e.rulesNS)))
		for _, ev := range evs.Items {
			if ev.Reason == "ReleaseIgnored" && ev.InvolvedObject.Name == "tenant" && ev.InvolvedObject.Kind == "ClusterRule" &&
				strings.Contains(ev.Message, "released only from ClusterRules in the operator namespace "+e.ns) {
				return true
			}
		}
		return false
	})

	// The operator's rule naming N releases N's two; M's stay held.
	annotate(e.ns, "ops", scanner.ReleaseValue(id, n.Scan))
	s.waitFor("gone static edge-5", "gone static edge-6")
	if last := scans(5); len(last.HeldRemovals) != 2 {
		t.Fatalf("after N's release: held %v, want trip M's edge-3, edge-4", last.HeldRemovals)
	}
	noneGone("edge-3", "edge-4")

	// The removals released event for M, as the CLI publishes it, releases M.
	pub := events.NewPublisher(s.js, "/enforcement/cli")
	e.must(pub.PublishAll(ctx, []events.Event{&events.RemovalsReleased{Source: m.Source, Trip: m.Scan, By: "test"}}))
	s.waitFor("gone static edge-3", "gone static edge-4")
	noneGone("edge-1", "edge-2")
}
