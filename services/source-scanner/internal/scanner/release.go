package scanner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// A trip is one firing of a source's removal breaker: the removals one scan held. It is named by
// the source id and that scan number, and an operator releases one trip at a time, either with
// the annotation ReleaseAnnotation=ReleaseValue(source, trip) on a ClusterRule in the operator
// namespace that uses the source, or with `enforcement release-removals <source> <trip>`, which
// publishes events.RemovalsReleased (recorded by Release). Either way the next complete scan
// removes the clusters that trip holds and that are still missing, and nothing else.

// Release is the release annotation of one rule in the operator namespace.
type Release struct {
	// Rule is the rule's namespace/name.
	Rule string `json:"rule"`
	// Trip is the scan number the annotation names.
	Trip uint64 `json:"trip"`
}

// ErrNotHeld is returned by Release for a trip that holds no removal (released already, its
// clusters listed again, a typo, or a trip that has not happened).
var ErrNotHeld = errors.New("the trip holds no removal")

// ReleaseValue is the annotation value that releases trip of the source sourceID.
func ReleaseValue(sourceID string, trip uint64) string {
	return sourceID + "/" + strconv.FormatUint(trip, 10)
}

// ParseReleaseValue reads a release annotation value of a rule whose source is sourceID: it
// must be "<sourceID>/<trip>" with a trip of 1 or more. The error says what is expected.
func ParseReleaseValue(value, sourceID string) (uint64, error) {
	id, num, ok := strings.Cut(strings.TrimSpace(value), "/")
	if !ok {
		return 0, fmt.Errorf("release value %q: want %s/<trip>", value, sourceID)
	}
	if id != sourceID {
		return 0, fmt.Errorf("release value %q names source %q, but the rule's source is %s", value, id, sourceID)
	}
	trip, err := strconv.ParseUint(num, 10, 64)
	if err != nil || trip == 0 {
		return 0, fmt.Errorf("release value %q: the trip must be a scan number", value)
	}
	return trip, nil
}

// Release records an operator's release of one trip of a source, received over the bus
// (events.RemovalsReleased), in the source's inventory record; the next complete scan removes
// what the trip holds. It returns an error wrapping ErrNotHeld when the trip holds no removal now
// (nothing is recorded, so it cannot release a later trip), and other errors for the bucket.
// Releasing a trip twice records it once.
func (s *Scanner) Release(ctx context.Context, ref events.SourceRef, trip uint64) error {
	st, err := s.state(ctx, ref)
	if err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if heldTrips(st.clusters)[trip] == 0 {
		return fmt.Errorf("release trip %d of source %s: %w", trip, ref.ID, ErrNotHeld)
	}
	if slices.Contains(st.meta.Released, trip) {
		return nil
	}
	st.meta.Released = append(st.meta.Released, trip)
	slices.Sort(st.meta.Released)
	if err := s.putMeta(ctx, st); err != nil {
		s.forget(ref.ID)
		return fmt.Errorf("release trip %d of source %s: %w", trip, ref.ID, err)
	}
	s.log.Info("Recorded release of held removals", "source", ref.ID, "kind", ref.Kind, "trip", trip,
		"held", heldTrips(st.clusters)[trip])
	return nil
}

// releasedTrips decides, before a scan, which trips it releases: those released over the bus
// and those a release annotation names, if that trip still holds removals. An annotation read
// while its trip did not exist yet (a trip number above the last scan) is an early release: it
// is remembered in the source record and releases nothing for as long as it stands, also once
// its trip happens; removing it (for one scan) or the CLI then releases that trip.
func (s *Scanner) releasedTrips(st *sourceState, src Source) map[uint64]bool {
	held := heldTrips(st.clusters)
	out := map[uint64]bool{}
	for _, t := range st.meta.Released {
		if held[t] > 0 {
			out[t] = true
		}
	}
	var early []Release
	for _, r := range src.Releases {
		log := []any{"source", src.Ref.ID, "kind", src.Ref.Kind, "rule", r.Rule, "trip", r.Trip}
		switch {
		case slices.Contains(st.meta.EarlyReleases, r):
			early = append(early, r)
		case r.Trip > st.meta.Scan:
			early = append(early, r)
			s.log.Warn("Ignored release annotation: it names a trip that has not happened, and will not release it", log...)
		case held[r.Trip] > 0:
			out[r.Trip] = true
			s.log.Info("Releasing held removals", append(log, "held", held[r.Trip])...)
		default:
			s.log.Debug("Ignored release annotation: its trip holds no removal", log...)
		}
	}
	st.meta.EarlyReleases = early
	return out
}

// heldTrips counts the held removals by trip (the scan that held them).
func heldTrips(clusters map[string]*record) map[uint64]int {
	out := map[uint64]int{}
	for _, r := range clusters {
		if r.HeldAt != 0 && !r.tombstone() {
			out[r.HeldAt]++
		}
	}
	return out
}

// stillHeld keeps the trips that still hold removals.
func stillHeld(trips []uint64, clusters map[string]*record) []uint64 {
	held := heldTrips(clusters)
	return slices.DeleteFunc(trips, func(t uint64) bool { return held[t] == 0 })
}

// heldMessage is the RemovalsHeld message: each trip with its clusters (a few names), and the
// two ways to release one.
func heldMessage(st *sourceState, capacity, known int, operatorNamespace string) string {
	byTrip := map[uint64][]string{}
	for _, r := range st.clusters {
		if r.HeldAt != 0 && !r.tombstone() {
			byTrip[r.HeldAt] = append(byTrip[r.HeldAt], r.Cluster.Name)
		}
	}
	trips := slices.Sorted(maps.Keys(byTrip))
	id := st.meta.Source.ID
	var b strings.Builder
	fmt.Fprintf(&b, "the removal breaker holds removals (cap %d of %d known per scan):", capacity, known)
	for _, t := range trips {
		names := byTrip[t]
		slices.Sort(names)
		fmt.Fprintf(&b, " trip %d holds %d (%s);", t, len(names), fewNames(names, 3))
	}
	fmt.Fprintf(&b, " check that they are really gone, then release one trip, e.g. %d: annotate a ClusterRule in namespace %s "+
		"that uses this source with %s=%s, or run: enforcement release-removals %s %d",
		trips[0], operatorNamespace, ReleaseAnnotation, ReleaseValue(id, trips[0]), id, trips[0])
	return b.String()
}

// fewNames joins the first n names and says how many more there are.
func fewNames(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}
