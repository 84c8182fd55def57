package aks

import (
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv/aksfake"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner/scannertest"
)

func testRef(secret string) events.SourceRef {
	ref := events.SourceRef{Kind: events.SourceKindAKS, SecretNamespace: "enforcement", SecretName: secret}
	ref.ID = events.SourceID(ref.Kind, ref.SecretNamespace, ref.SecretName, events.AKSSourceFilters([]string{subA, subB}, nil))
	return ref
}

// TestScannerDegradedRemovesNothing drives the real scanner (embedded JetStream) with an AKS
// Lister against the ARM fake: after a complete scan, each fault makes scans degraded with a
// clear reason in a SourceDegraded event, and no cluster is gone even after the grace period;
// when the fault clears, the next scan is complete and still removes nothing.
func TestScannerDegradedRemovesNothing(t *testing.T) {
	bus := scannertest.NewBus(t)
	tests := []scannertest.Fault[*aksfake.Server]{
		{Name: "revoked token", Apply: func(f *aksfake.Server) { f.RejectTokens = true }, WantReason: events.DegradedUnauthorized},
		{Name: "role removed", Apply: func(f *aksfake.Server) {
			f.Fail[subA] = aksfake.Error{Status: 403, Code: "AuthorizationFailed", Msg: "no read"}
		}, WantReason: events.DegradedUnauthorized},
		{Name: "throttled beyond the cap", Apply: func(f *aksfake.Server) {
			f.Throttle[subA], f.Throttle[subB] = aksfake.Throttle{N: 1000, RetryAfter: 3600}, aksfake.Throttle{N: 1000, RetryAfter: 3600}
		}, WantReason: events.DegradedListFailed},
		{Name: "second page fails", Apply: func(f *aksfake.Server) {
			f.FailPage[subA] = aksfake.PageError{Page: 1, Error: aksfake.Error{Status: 500, Code: "InternalServerError", Msg: "boom"}}
		}, WantReason: events.DegradedPartial},
		{Name: "one subscription fails", Apply: func(f *aksfake.Server) {
			f.Fail[subB] = aksfake.Error{Status: 404, Code: "SubscriptionNotFound", Msg: "gone"}
		}, WantReason: events.DegradedPartial},
		{Name: "empty but malformed", Apply: func(f *aksfake.Server) { f.Malformed[subA], f.Malformed[subB] = true, true }, WantReason: events.DegradedListFailed},
	}
	for i, tt := range tests {
		t.Run(tt.Name, func(t *testing.T) {
			f := aksfake.New(t)
			f.PageSize = 1
			f.Add(subA, "rg", "a", "Succeeded", "Running", nil)
			f.Add(subA, "rg", "b", "Succeeded", "Running", nil)
			f.Add(subB, "rg", "c", "Succeeded", "Stopped", nil)
			l, _ := newTestLister(t, f, Options{Subscriptions: []string{subA, subB}, MaxRetries: 1}, secretCreds)
			bus.CheckDegradedRemovesNothing(t, scanner.Source{Ref: testRef("aks-" + string(rune('a'+i))), Lister: l}, scannertest.NewClock(),
				func() { f.Configure(tt.Apply) },
				func() {
					f.Configure(func(f *aksfake.Server) {
						f.RejectTokens = false
						f.Fail, f.FailPage, f.Throttle, f.Malformed = map[string]aksfake.Error{}, map[string]aksfake.PageError{}, map[string]aksfake.Throttle{}, map[string]bool{}
					})
				},
				tt.WantReason)
		})
	}
}

// TestStoppedClusterIsNeverGone: a cluster stopped for the night stays known (updated, not
// eligible) past any grace period, becomes eligible again when started, and only a deleted
// cluster is gone once the grace period has passed.
func TestStoppedClusterIsNeverGone(t *testing.T) {
	bus := scannertest.NewBus(t)
	clk := scannertest.NewClock()
	sc := bus.Scanner(clk)
	f := aksfake.New(t)
	f.Add(subA, "rg", "night", "Succeeded", "Running", nil)
	f.Add(subB, "rg", "doomed", "Succeeded", "Running", nil)
	l, _ := newTestLister(t, f, Options{Subscriptions: []string{subA, subB}}, secretCreds)
	src := scanner.Source{Ref: testRef("aks-stopped"), Lister: l}
	scannertest.ScanOK(t, sc, src)
	bus.New(t)

	f.SetState(subA, "night", "Stopping", "Running")
	scannertest.ScanOK(t, sc, src)
	f.SetState(subA, "night", "Succeeded", "Stopped")
	f.Remove(subB, "doomed")
	var gone []string
	var last *events.Cluster
	for range 3 {
		clk.Add(2 * time.Minute)
		scannertest.ScanOK(t, sc, src)
		for _, e := range bus.New(t) {
			switch e := e.(type) {
			case *events.ClusterGone:
				gone = append(gone, e.Name)
			case *events.ClusterUpdated:
				last = &e.Cluster
			}
		}
	}
	if len(gone) != 1 || gone[0] != "doomed" {
		t.Fatalf("gone = %v, want only the deleted cluster", gone)
	}
	if last == nil || last.Name != "night" || last.State != "Stopped" || last.Eligible {
		t.Fatalf("last update = %+v, want night Stopped, not eligible", last)
	}
	f.SetState(subA, "night", "Succeeded", "Running")
	scannertest.ScanOK(t, sc, src)
	var started bool
	for _, e := range bus.New(t) {
		if u, ok := e.(*events.ClusterUpdated); ok && u.Cluster.Name == "night" && u.Cluster.Eligible {
			started = true
		}
	}
	if !started {
		t.Fatal("started cluster not announced eligible")
	}
}
