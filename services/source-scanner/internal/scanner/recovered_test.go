package scanner_test

import (
	"context"
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// recoveries picks the SourceRecovered events out of evs.
func recoveries(evs []events.Event) []*events.SourceRecovered {
	var out []*events.SourceRecovered
	for _, e := range evs {
		if r, ok := e.(*events.SourceRecovered); ok {
			out = append(out, r)
		}
	}
	return out
}

// expectRecovered checks that the stream got exactly n SourceRecovered events since the last
// look, and returns them.
func (h *harness) expectRecovered(n int) []*events.SourceRecovered {
	h.t.Helper()
	got := recoveries(h.events())
	if len(got) != n {
		h.t.Fatalf("%d source recovered events, want %d: %+v", len(got), n, got)
	}
	return got
}

// TestRecoveredOnceAfterADegradedSpell: a complete listing after degraded ones publishes one
// SourceRecovered, also when the scanner restarted in between (the spell is in the inventory);
// healthy scans publish none, and a crash after the publish announces it again under the same id,
// which the stream drops.
func TestRecoveredOnceAfterADegradedSpell(t *testing.T) {
	h := newHarness(t, 10)
	h.rancher.SetClusters(clusters(3)...)
	h.scan()
	h.scan()
	h.expectRecovered(0) // never degraded

	h.rancher.FailPage(1, 500)
	first := h.scan()
	h.expectRecovered(0)

	h.connect() // a new process right after the degraded scan: nothing of the spell in memory
	h.scan()
	h.rancher.Heal()
	res := h.scan()
	r := h.expectRecovered(1)[0]
	if r.Source != h.src.Ref || r.DegradedSince != first.Scan || r.Scan != res.Scan || r.Known != 3 {
		t.Fatalf("recovered = %+v, want source %s, degradedSince %d, scan %d, 3 known", r, h.src.Ref.ID, first.Scan, res.Scan)
	}
	h.scan()
	h.expectRecovered(0)

	// A crash between the publish and the record write: the next scan announces the recovery
	// again with the same id, so the stream keeps one.
	h.rancher.SetClusters()
	h.scan() // EmptyListing
	h.rancher.SetClusters(clusters(3)...)
	h.restart(&failingPublisher{inner: events.NewPublisher(h.js, "/enforcement/source-scanner"), publishFirst: true})
	if _, err := h.sc.ScanOnce(context.Background(), h.src); err == nil {
		t.Fatal("scan with a publisher that fails after publishing succeeded")
	}
	h.restart(events.NewPublisher(h.js, "/enforcement/source-scanner"))
	h.scan()
	h.expectRecovered(1)
}

// TestRecoveredWaitsForHeldRemovals: held removals are a degraded state of their own; a
// complete listing that still holds removals announces no recovery, the scan after the held
// clusters came back does.
func TestRecoveredWaitsForHeldRemovals(t *testing.T) {
	h := newHarness(t, 100)
	cs := clusters(20) // cap: 2 removals per scan
	h.rancher.SetClusters(cs...)
	h.scan()
	h.events()

	h.rancher.SetClusters(cs[5:]...)
	h.scan()
	h.clock.Add(grace)
	if res := h.scan(); len(res.Held) != 5 || !res.Complete {
		t.Fatalf("result = %+v, want 5 removals held", res)
	}
	h.clock.Add(time.Hour)
	h.scan()
	h.expectRecovered(0)

	h.rancher.SetClusters(cs...) // the five are back: nothing is held any more
	if res := h.scan(); len(res.Held) != 0 {
		t.Fatalf("result = %+v, want nothing held", res)
	}
	h.expectRecovered(1)
	h.scan()
	h.expectRecovered(0)
}
