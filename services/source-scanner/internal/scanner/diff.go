package scanner

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
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
	// attrHash is hashAttributes(Cluster.Attributes) (not serialised). The diff compares it,
	// so that the scanner need not keep every cluster's attributes in memory.
	attrHash uint64
	// slim records have had Cluster.Attributes dropped from memory after their announcement
	// reached the stream; the KV record still holds them.
	slim bool
}

// makeSlim drops the attributes from memory, keeping their hash.
func (r *record) makeSlim() {
	r.Cluster.Attributes = nil
	r.slim = true
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

// differ diffs a complete listing against the inventory page by page, so that a scan of a large
// source holds one page of the listing at a time, not all of it: it keeps only the changes and
// which clusters were listed, by the known record's own key string (not the page's). Tombstones
// count as unknown: a cluster listed again after its gone event appears again.
type differ struct {
	known  map[string]*record
	listed map[string]struct{}
	// count is how many clusters the pages so far listed.
	count int
	p     plan
}

func newDiffer(known map[string]*record) *differ {
	return &differ{known: known, listed: make(map[string]struct{}, len(known))}
}

// add diffs one page of the listing, validated and named. A cluster key listed twice, in this
// page or an earlier one, makes the listing untrustworthy: a DegradedError.
func (d *differ) add(page []events.Cluster) error {
	for i := range page {
		c := &page[i]
		key := c.Key
		old, ok := d.known[key]
		if ok {
			key = old.Cluster.Key
		}
		if _, dup := d.listed[key]; dup {
			return Degradedf(events.DegradedListFailed, "cluster key %q is listed twice", c.Key)
		}
		d.listed[key] = struct{}{}
		d.count++
		if !ok || old.tombstone() {
			d.p.Appeared = append(d.p.Appeared, *c)
			continue
		}
		if changed := changedFields(old, *c, hashAttributes(c.Attributes)); len(changed) > 0 {
			d.p.Updated = append(d.p.Updated, updateChange{Cluster: *c, Changed: changed})
			continue
		}
		if !old.MissingSince.IsZero() || old.HeldAt != 0 {
			d.p.Returned = append(d.p.Returned, old.Cluster.Key)
		}
	}
	return nil
}

// finish completes the plan once every page was added: the known clusters no page listed are
// missing, or due once missing for the grace period. Every slice of the plan is sorted by
// cluster key, so the events of one scan come out in a stable order whatever the paging.
func (d *differ) finish(now time.Time, grace time.Duration) plan {
	p := d.p
	for key, r := range d.known {
		if r.tombstone() {
			continue
		}
		if _, ok := d.listed[key]; ok {
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

// diff compares a complete listing, as one page, with the inventory. It is pure, so it is unit
// tested and benchmarked without NATS.
func diff(known map[string]*record, listing []events.Cluster, now time.Time, grace time.Duration) (plan, error) {
	d := newDiffer(known)
	if err := d.add(listing); err != nil {
		return plan{}, err
	}
	return d.finish(now, grace), nil
}

// changedFields names the announced fields that differ between two states of a cluster, in the
// vocabulary of events.ClusterUpdated.Changed, plus "name", "secret" (the credentials Secret
// reference, which the static source sets per cluster) and "identity" (the provider identity).
func changedFields(known *record, cur events.Cluster, curAttrHash uint64) []string {
	old := known.Cluster
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
	if known.attrHash != curAttrHash {
		changed = append(changed, "attributes")
	}
	if old.Source.SecretNamespace != cur.Source.SecretNamespace || old.Source.SecretName != cur.Source.SecretName {
		changed = append(changed, "secret")
	}
	if old.Identity != cur.Identity {
		// Also a record written before identities existed: its first scan announces the identity.
		changed = append(changed, "identity")
	}
	return changed
}

// hashAttributes hashes attribute values of the shapes encoding/json (and YAML through JSON)
// decode into (nil, bool, float64, string, []any, map[string]any), so that equal attributes hash
// equal wherever they were decoded; any other type is hashed through its JSON encoding. An empty
// or missing map hashes to 0.
//
// Hand-written (FNV-1a 64 over a tagged walk of the value) because it runs on every listed
// cluster at every scan and must not allocate: hash/fnv behind hash.Hash allocates for every
// string written, and sorting map keys allocates per map. Map entries are hashed one by one and
// summed, which is independent of iteration order without sorting. A collision could only hide
// one attribute change of one cluster, with odds of about 2^-64.
func hashAttributes(m map[string]any) uint64 {
	if len(m) == 0 {
		return 0
	}
	return hashValue(m)
}

// fnvOffset is the FNV-1a 64-bit offset basis.
const fnvOffset fnv64 = 14695981039346656037

// fnv64 is an FNV-1a 64-bit hash state.
type fnv64 uint64

func (h *fnv64) byte(b byte) {
	*h = (*h ^ fnv64(b)) * 1099511628211
}

func (h *fnv64) uint(v uint64) {
	for range 8 {
		h.byte(byte(v))
		v >>= 8
	}
}

// string writes a tagged, length-prefixed string, so ("ab","c") and ("a","bc") differ.
func (h *fnv64) string(tag byte, s string) {
	h.byte(tag)
	h.uint(uint64(len(s)))
	for i := 0; i < len(s); i++ {
		h.byte(s[i])
	}
}

func hashValue(v any) uint64 {
	h := fnvOffset
	switch v := v.(type) {
	case nil:
		h.byte('n')
	case bool:
		if v {
			h.byte('t')
		} else {
			h.byte('f')
		}
	case float64:
		h.byte('d')
		h.uint(math.Float64bits(v))
	case string:
		h.string('s', v)
	case []any:
		h.byte('a')
		h.uint(uint64(len(v)))
		for _, x := range v {
			h.uint(hashValue(x))
		}
	case map[string]any:
		var sum uint64
		for k, x := range v {
			e := fnvOffset
			e.string('k', k)
			e.uint(hashValue(x))
			sum += uint64(e)
		}
		h.byte('m')
		h.uint(uint64(len(v)))
		h.uint(sum)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			b = fmt.Appendf(nil, "%#v", v)
		}
		h.string('j', string(b))
	}
	return uint64(h)
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
// an earlier scan (a trip) stays held until an operator releases that trip (released[the scan
// that held it]), whatever later scans find; a released cluster is removed without counting
// against the cap. The other due clusters are removed if there are at most removalCap of them,
// and all held otherwise: removing "the first 10%" every scan would still empty a source within
// a few scans.
func decideRemovals(known map[string]*record, due []string, released map[uint64]bool, fraction float64) removals {
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
		case r.HeldAt != 0 && released[r.HeldAt]:
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
