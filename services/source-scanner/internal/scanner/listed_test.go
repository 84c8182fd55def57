package scanner_test

import (
	"testing"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// TestListedAfterTheFirstCompleteListing: a source announces SourceListed at its first complete
// listing, after that scan's cluster events in the stream and with the count of clusters they
// announced; degraded scans and later complete ones announce nothing, and a new scanner process
// announces the source again (a rule-engine that missed it hears it then).
func TestListedAfterTheFirstCompleteListing(t *testing.T) {
	h := newHarness(t, 10)
	h.rancher.SetClusters(clusters(3)...)
	h.rancher.FailPage(1, 500)
	h.scan()
	if got := listings(h.events()); len(got) != 0 {
		t.Fatalf("a degraded scan announced %+v", got)
	}

	h.rancher.Heal()
	res := h.scan()
	evs := h.events()
	got := listings(evs)
	if len(got) != 1 || got[0].Source != h.src.Ref || got[0].Scan != res.Scan || got[0].Known != 3 {
		t.Fatalf("first complete listing announced %+v, want one SourceListed of scan %d with 3 known", got, res.Scan)
	}
	if _, last := evs[len(evs)-1].(*events.SourceListed); !last || len(summary(evs)) != 3 {
		t.Fatalf("stream after the first complete listing = %v, want the 3 appeared events, then (after the recovery) SourceListed", types(evs))
	}

	h.scan()
	if got := listings(h.events()); len(got) != 0 {
		t.Fatalf("a later complete listing announced %+v", got)
	}

	h.connect() // a new scanner process
	res = h.scan()
	if got := listings(h.events()); len(got) != 1 || got[0].Scan != res.Scan || got[0].Known != 3 {
		t.Fatalf("after a restart: %+v, want one SourceListed of scan %d", got, res.Scan)
	}
}

// listings picks the SourceListed events out of evs.
func listings(evs []events.Event) []*events.SourceListed {
	var out []*events.SourceListed
	for _, e := range evs {
		if l, ok := e.(*events.SourceListed); ok {
			out = append(out, l)
		}
	}
	return out
}

// types lists the event types of evs, in order.
func types(evs []events.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type()
	}
	return out
}
