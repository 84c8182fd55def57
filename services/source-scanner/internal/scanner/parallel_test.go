package scanner

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestParallelCallsEachIndexOnceWithinTheLimit: every index is called exactly once, never more
// than limit at a time, and a limit below one still makes progress.
func TestParallelCallsEachIndexOnceWithinTheLimit(t *testing.T) {
	for _, limit := range []int{0, 1, 3} {
		calls := make([]atomic.Int32, 20)
		var running, peak atomic.Int32
		Parallel(len(calls), limit, func(i int) {
			n := running.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(time.Millisecond)
			calls[i].Add(1)
			running.Add(-1)
		})
		for i := range calls {
			if got := calls[i].Load(); got != 1 {
				t.Errorf("limit %d: index %d called %d times", limit, i, got)
			}
		}
		if want := int32(max(limit, 1)); peak.Load() > want {
			t.Errorf("limit %d: %d calls at once", limit, peak.Load())
		}
	}
}
