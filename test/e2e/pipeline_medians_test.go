package e2e

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// pipelineRun is what one round of BenchmarkPipeline measured, for the medians over the rounds
// of one setting (pipelineRuns).
type pipelineRun struct {
	// createRatio and applyRatio are the create's time to the plain-create floor's and to the
	// server-side-apply floor's; editRatio and editApplyRatio the edit's to the plain-update
	// floor's and to the server-side-apply floor's.
	createRatio, applyRatio, editRatio, editApplyRatio float64
	// newCluster are the new clusters' times, event to last Application.
	newCluster []time.Duration
	// resident and live are each service's growth a cluster, in KB: its resident set and its
	// live heap, after the run against idle.
	resident, live map[string]float64
}

// pipelineRuns are the rounds measured so far in this process, by their setting (clusters, rules
// and the services' settings): `go test -count 5` runs BenchmarkPipeline five times in one
// process, and the last round prints the medians of all five.
var pipelineRuns = struct {
	sync.Mutex
	bySetting map[string][]pipelineRun
}{bySetting: map[string][]pipelineRun{}}

// recordPipelineRun adds a round's figures to those of its setting and, from the second round
// on, logs the medians of the rounds so far: each ratio's median and the runs' values in order,
// the new clusters' median and p99 over the rounds' clusters together, and each service's
// median growth a cluster.
func recordPipelineRun(b *testing.B, setting string, run pipelineRun) {
	pipelineRuns.Lock()
	defer pipelineRuns.Unlock()
	runs := append(pipelineRuns.bySetting[setting], run)
	pipelineRuns.bySetting[setting] = runs
	if len(runs) < 2 {
		return
	}
	figure := func(of func(pipelineRun) float64) string {
		values := make([]float64, len(runs))
		for i, r := range runs {
			values[i] = of(r)
		}
		return fmt.Sprintf("%.2f (%s)", medianOf(values), joinFloats(values, "%.2f"))
	}
	var pooled []time.Duration
	for _, r := range runs {
		pooled = append(pooled, r.newCluster...)
	}
	slices.Sort(pooled)
	var memory []string
	for _, name := range hubServices {
		resident, live := make([]float64, len(runs)), make([]float64, len(runs))
		for i, r := range runs {
			resident[i], live[i] = r.resident[name], r.live[name]
		}
		memory = append(memory, fmt.Sprintf("    %-18s resident %+.1f KB a cluster (%s), live heap %+.1f KB (%s)",
			name, medianOf(resident), joinFloats(resident, "%+.1f"), medianOf(live), joinFloats(live, "%+.1f")))
	}
	b.Logf("medians of the %d runs so far at %s (each run's figure in brackets, in order):\n"+
		"  create / plain-create floor        %s\n"+
		"  create / server-side-apply floor   %s\n"+
		"  edit / plain-update floor          %s\n"+
		"  edit / server-side-apply floor     %s\n"+
		"  one new cluster, the %d of all runs together: %s\n"+
		"  memory growth a cluster:\n%s",
		len(runs), setting,
		figure(func(r pipelineRun) float64 { return r.createRatio }),
		figure(func(r pipelineRun) float64 { return r.applyRatio }),
		figure(func(r pipelineRun) float64 { return r.editRatio }),
		figure(func(r pipelineRun) float64 { return r.editApplyRatio }),
		len(pooled), spread(pooled),
		strings.Join(memory, "\n"))
}

// medianOf is the median of values (the mean of the middle two for an even count).
func medianOf(values []float64) float64 {
	sorted := slices.Sorted(slices.Values(values))
	mid := len(sorted) / 2
	if len(sorted)%2 == 0 {
		return (sorted[mid-1] + sorted[mid]) / 2
	}
	return sorted[mid]
}

// joinFloats formats each value with format, comma-separated.
func joinFloats(values []float64, format string) string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = fmt.Sprintf(format, v)
	}
	return strings.Join(out, ", ")
}

// TestMedianOf: the median of an odd count is its middle value, of an even count the mean of
// the middle two, whatever the order given; the values given are left in their order.
func TestMedianOf(t *testing.T) {
	for _, c := range []struct {
		values []float64
		want   float64
	}{
		{[]float64{3}, 3},
		{[]float64{2.5, 1.0, 9.0}, 2.5},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{1.2, 1.2, 5}, 1.2},
	} {
		given := slices.Clone(c.values)
		if got := medianOf(c.values); got != c.want {
			t.Errorf("medianOf(%v) = %v, want %v", c.values, got, c.want)
		}
		if !slices.Equal(given, c.values) {
			t.Errorf("medianOf reordered its input: %v, was %v", c.values, given)
		}
	}
}
