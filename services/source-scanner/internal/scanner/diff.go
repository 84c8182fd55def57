package scanner

import (
	"maps"
	"math"
	"reflect"
	"sort"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// Kinds of event a record write announces (record.Event).
const (
	eventAppeared = "appeared"
	eventUpdated  = "updated"
	eventGone     = "gone"
)

// record is one cluster's entry in the inventory, stored as JSON under clusterKey. It is the
// last state the scanner announced, plus the bookkeeping of the deletion safety rules.
type record struct {
	// Cluster is the cluster as last announced.
	Cluster events.Cluster `json:"cluster"`
	// Event, when set, says that the write which produced this record announces that event
	// (appeared, updated or gone) with the record's KV revision. If the revision is above the
	// source's published watermark the event may not have reached the stream yet, and the next
	// scan republishes it (the id is the same, so the stream drops a duplicate).
	Event   string   `json:"event,omitempty"`
	Changed []string `json:"changed,omitempty"`
	// MissingSince is the time of the first complete listing that did not contain the cluster;
	// zero while it is listed.
	MissingSince time.Time `json:"missingSince,omitzero"`
	// LastSeen is the time of the last complete listing that contained the cluster, recorded
	// when it went missing.
	LastSeen time.Time `json:"lastSeen,omitzero"`
	// HeldAt is the scan whose removal breaker held this cluster's removal; 0 when not held.
	HeldAt uint64 `json:"heldAt,omitempty"`

	// rev is the KV revision of the stored record (not serialised).
	rev uint64
}

// tombstone reports whether the record only remains to carry its gone event's revision.
func (r *record) tombstone() bool { return r.Event == eventGone }

// updateChange is a listed cluster whose announced fields changed.
type updateChange struct {
	Cluster events.Cluster
	Changed []string
}

// plan is what one complete listing means for the inventory, before the removal breaker.
type plan struct {
	Appeared []events.Cluster
	Updated  []updateChange
	// Returned are known clusters listed again after having been missing, with nothing else
	// changed: their missing (and held) marks are cleared without an event.
	Returned []string
	// Missing are clusters absent from this listing for the first time.
	Missing []string
	// Due are clusters absent from complete listings for at least the grace period.
	Due []string
}

// diff compares a complete listing with the inventory. It is pure, so it is unit tested and
// benchmarked without NATS. Tombstones count as unknown: a cluster listed again after its gone
// event appears again. Every slice of the result is sorted by cluster key, so the events of one
// scan come out in a stable order.
func diff(known map[string]*record, listing []events.Cluster, now time.Time, grace time.Duration) plan {
	var p plan
	listed := make(map[string]struct{}, len(listing))
	for _, c := range listing {
		listed[c.Key] = struct{}{}
		old, ok := known[c.Key]
		if !ok || old.tombstone() {
			p.Appeared = append(p.Appeared, c)
			continue
		}
		if changed := changedFields(old.Cluster, c); len(changed) > 0 {
			p.Updated = append(p.Updated, updateChange{Cluster: c, Changed: changed})
			continue
		}
		if !old.MissingSince.IsZero() || old.HeldAt != 0 {
			p.Returned = append(p.Returned, c.Key)
		}
	}
	for key, r := range known {
		if r.tombstone() {
			continue
		}
		if _, ok := listed[key]; ok {
			continue
		}
		switch {
		case r.MissingSince.IsZero():
			p.Missing = append(p.Missing, key)
		case now.Sub(r.MissingSince) >= grace:
			p.Due = append(p.Due, key)
		}
	}
	sort.Slice(p.Appeared, func(i, j int) bool { return p.Appeared[i].Key < p.Appeared[j].Key })
	sort.Slice(p.Updated, func(i, j int) bool { return p.Updated[i].Cluster.Key < p.Updated[j].Cluster.Key })
	sort.Strings(p.Returned)
	sort.Strings(p.Missing)
	sort.Strings(p.Due)
	return p
}

// changedFields names the announced fields that differ between two states of a cluster, in the
// vocabulary of events.ClusterUpdated.Changed, plus "name" and "secret" (the credentials Secret
// reference, which the static source sets per cluster).
func changedFields(old, cur events.Cluster) []string {
	var changed []string
	if old.Name != cur.Name {
		changed = append(changed, "name")
	}
	if !maps.Equal(old.Labels, cur.Labels) {
		changed = append(changed, "labels")
	}
	if old.URL != cur.URL {
		changed = append(changed, "url")
	}
	if old.State != cur.State {
		changed = append(changed, "state")
	}
	if old.Eligible != cur.Eligible {
		changed = append(changed, "eligible")
	}
	if !attributesEqual(old.Attributes, cur.Attributes) {
		changed = append(changed, "attributes")
	}
	if old.Source.SecretNamespace != cur.Source.SecretNamespace || old.Source.SecretName != cur.Source.SecretName {
		changed = append(changed, "secret")
	}
	return changed
}

// attributesEqual compares two attribute maps decoded from JSON (or YAML through JSON), where
// an empty and a missing map mean the same.
func attributesEqual(a, b map[string]any) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return jsonEqual(a, b)
}

// jsonEqual compares two values of the shapes encoding/json decodes into `any` (nil, bool,
// float64, string, []any, map[string]any) without allocating; other types fall back to
// reflect.DeepEqual. Hand-written because reflect.DeepEqual allocates for every map entry,
// which made the 10,000-cluster diff about ten times slower (see BenchmarkDiff10k).
func jsonEqual(a, b any) bool {
	switch a := a.(type) {
	case nil:
		return b == nil
	case string:
		bs, ok := b.(string)
		return ok && a == bs
	case float64:
		bf, ok := b.(float64)
		return ok && a == bf
	case bool:
		bb, ok := b.(bool)
		return ok && a == bb
	case map[string]any:
		bm, ok := b.(map[string]any)
		if !ok || len(a) != len(bm) {
			return false
		}
		for k, av := range a {
			bv, ok := bm[k]
			if !ok || !jsonEqual(av, bv) {
				return false
			}
		}
		return true
	case []any:
		bl, ok := b.([]any)
		if !ok || len(a) != len(bl) {
			return false
		}
		for i := range a {
			if !jsonEqual(a[i], bl[i]) {
				return false
			}
		}
		return true
	default:
		return reflect.DeepEqual(a, b)
	}
}

// removalCap is the removal breaker's limit for one scan: max(1, fraction × known), rounded
// down, so a source of 5 clusters may lose one per scan and a source of 100 ten at 0.1.
func removalCap(known int, fraction float64) int {
	return max(1, int(math.Floor(fraction*float64(known))))
}

// removals is the breaker's decision for one scan.
type removals struct {
	// Remove are the clusters whose gone event is published now.
	Remove []string
	// Hold are the clusters newly held by this scan.
	Hold []string
	// Tripped is set when this scan's due removals exceeded the cap.
	Tripped bool
}

// decideRemovals applies the removal breaker to the clusters due for removal. A cluster held by
// an earlier scan stays held until an operator releases it (releaseThrough ≥ the scan that held
// it), whatever later scans find; a released cluster is removed without counting against the
// cap. The other due clusters are removed if there are at most removalCap of them, and all held
// otherwise: removing "the first 10%" every scan would still empty a source within a few scans.
func decideRemovals(known map[string]*record, due []string, releaseThrough uint64, fraction float64) removals {
	live := 0
	for _, r := range known {
		if !r.tombstone() {
			live++
		}
	}
	var d removals
	var fresh []string
	for _, key := range due {
		r := known[key]
		switch {
		case r.HeldAt != 0 && r.HeldAt <= releaseThrough:
			d.Remove = append(d.Remove, key)
		case r.HeldAt != 0:
			// Still held: waits for its release.
		default:
			fresh = append(fresh, key)
		}
	}
	if len(fresh) > removalCap(live, fraction) {
		d.Hold = fresh
		d.Tripped = true
		return d
	}
	d.Remove = append(d.Remove, fresh...)
	sort.Strings(d.Remove)
	return d
}
