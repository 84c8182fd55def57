package scanner

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
)

func cluster(key string, labels map[string]string) events.Cluster {
	return events.Cluster{Key: key, Name: "n-" + key, URL: "https://" + key, Labels: labels, State: "active", Eligible: true,
		Attributes: map[string]any{"id": key, "nodes": float64(3)}}
}

func TestDiff(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	grace := 10 * time.Minute
	known := map[string]*record{
		"same":      {Cluster: cluster("same", map[string]string{"env": "a"})},
		"relabeled": {Cluster: cluster("relabeled", map[string]string{"env": "a"})},
		"returning": {Cluster: cluster("returning", nil), MissingSince: now.Add(-time.Hour)},
		"vanishing": {Cluster: cluster("vanishing", nil)},
		"waiting":   {Cluster: cluster("waiting", nil), MissingSince: now.Add(-grace + time.Second)},
		"due":       {Cluster: cluster("due", nil), MissingSince: now.Add(-grace)},
		"tomb":      {Cluster: cluster("tomb", nil), Event: eventGone},
	}
	for _, r := range known {
		r.attrHash = hashAttributes(r.Cluster.Attributes)
	}
	ineligible := cluster("returning", nil)
	ineligible.State, ineligible.Eligible = "provisioning", false
	listing := []events.Cluster{
		cluster("same", map[string]string{"env": "a"}),
		cluster("relabeled", map[string]string{"env": "b"}),
		cluster("returning", nil),
		cluster("new", nil),
		cluster("tomb", nil),
	}
	p, err := diff(known, listing, now, grace)
	if err != nil {
		t.Fatal(err)
	}
	// The same listing in pages of 2, 1 and 2 clusters gives the same plan.
	d := newDiffer(known)
	for _, page := range [][]events.Cluster{listing[:2], listing[2:3], listing[3:]} {
		if err := d.add(page); err != nil {
			t.Fatal(err)
		}
	}
	if paged := d.finish(now, grace); !reflect.DeepEqual(paged, p) {
		t.Errorf("paged plan = %+v, want %+v", paged, p)
	}
	keys := func(cs []events.Cluster) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Key)
		}
		return out
	}
	if got := keys(p.Appeared); !reflect.DeepEqual(got, []string{"new", "tomb"}) {
		t.Errorf("appeared = %v", got)
	}
	if len(p.Updated) != 1 || p.Updated[0].Cluster.Key != "relabeled" || !reflect.DeepEqual(p.Updated[0].Changed, []string{"labels"}) {
		t.Errorf("updated = %+v", p.Updated)
	}
	if !reflect.DeepEqual(p.Returned, []string{"returning"}) || !reflect.DeepEqual(p.Missing, []string{"vanishing"}) ||
		!reflect.DeepEqual(p.Due, []string{"due"}) {
		t.Errorf("returned %v missing %v due %v", p.Returned, p.Missing, p.Due)
	}

	// A state change of a returning cluster is an update naming state and eligibility.
	if p, err = diff(known, []events.Cluster{ineligible}, now, grace); err != nil {
		t.Fatal(err)
	}
	if len(p.Updated) != 1 || !reflect.DeepEqual(p.Updated[0].Changed, []string{"state", "eligible"}) {
		t.Errorf("updated = %+v", p.Updated)
	}
}

// TestDiffRejectsAKeyListedTwice: a key listed twice, in one page or in two, known or new, makes
// the listing untrustworthy, whatever the page that repeats it.
func TestDiffRejectsAKeyListedTwice(t *testing.T) {
	known := map[string]*record{"old": {Cluster: cluster("old", nil)}}
	for _, tt := range []struct {
		name  string
		pages [][]events.Cluster
		key   string
	}{
		{"known key, one page", [][]events.Cluster{{cluster("old", nil), cluster("old", nil)}}, "old"},
		{"known key, two pages", [][]events.Cluster{{cluster("old", nil)}, {cluster("a", nil), cluster("old", nil)}}, "old"},
		{"new key, two pages", [][]events.Cluster{{cluster("new", nil)}, {cluster("new", nil)}}, "new"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := newDiffer(known)
			var err error
			for _, page := range tt.pages {
				if err = d.add(page); err != nil {
					break
				}
			}
			want := fmt.Sprintf("cluster key %q is listed twice", tt.key)
			if ReasonOf(err) != events.DegradedListFailed || !strings.Contains(fmt.Sprint(err), want) {
				t.Fatalf("err = %v (reason %q), want %s: %q", err, ReasonOf(err), events.DegradedListFailed, want)
			}
		})
	}
}

func TestChangedFields(t *testing.T) {
	a := cluster("k", map[string]string{"x": "1"})
	tests := []struct {
		name   string
		mutate func(c *events.Cluster)
		want   []string
	}{
		{"nothing", func(*events.Cluster) {}, nil},
		{"labels removed", func(c *events.Cluster) { c.Labels = nil; c.Attributes = map[string]any{"id": "k", "nodes": float64(3)} }, []string{"labels"}},
		{"url", func(c *events.Cluster) { c.URL = "https://other" }, []string{"url"}},
		{"name", func(c *events.Cluster) { c.Name = "renamed" }, []string{"name"}},
		{"attribute", func(c *events.Cluster) { c.Attributes = map[string]any{"id": "k", "nodes": float64(4)} }, []string{"attributes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := cluster("k", map[string]string{"x": "1"})
			tt.mutate(&b)
			known := &record{Cluster: a, attrHash: hashAttributes(a.Attributes)}
			if got := changedFields(known, b, hashAttributes(b.Attributes)); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("changed = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRemovalCap(t *testing.T) {
	for _, tt := range []struct {
		known    int
		fraction float64
		want     int
	}{{0, 0.1, 1}, {5, 0.1, 1}, {19, 0.1, 1}, {20, 0.1, 2}, {100, 0.1, 10}, {10000, 0.1, 1000}, {10, 1, 10}} {
		if got := removalCap(tt.known, tt.fraction); got != tt.want {
			t.Errorf("removalCap(%d, %g) = %d, want %d", tt.known, tt.fraction, got, tt.want)
		}
	}
}

func TestDecideRemovals(t *testing.T) {
	known := map[string]*record{}
	for i := range 20 {
		known[fmt.Sprint(i)] = &record{Cluster: cluster(fmt.Sprint(i), nil)}
	}
	// 20 known at 0.1: the cap is 2.
	if d := decideRemovals(known, []string{"1", "2"}, nil, 0.1); d.Tripped || len(d.Remove) != 2 {
		t.Errorf("2 due: %+v, want both removed", d)
	}
	d := decideRemovals(known, []string{"1", "2", "3"}, nil, 0.1)
	if !d.Tripped || len(d.Remove) != 0 || len(d.Hold) != 3 {
		t.Errorf("3 due: %+v, want all 3 held", d)
	}
	known["1"].HeldAt, known["2"].HeldAt, known["3"].HeldAt = 7, 7, 9
	// Held clusters stay held without a release, even when few are due.
	if d := decideRemovals(known, []string{"1"}, nil, 0.1); len(d.Remove) != 0 || d.Tripped {
		t.Errorf("held, no release: %+v", d)
	}
	// Releasing trip 7 frees the ones held by scan 7, not the one held by scan 9, and does not
	// count against the cap; releasing trip 9 does not free those of trip 7.
	d = decideRemovals(known, []string{"1", "2", "3", "4", "5"}, map[uint64]bool{7: true}, 0.1)
	if !reflect.DeepEqual(d.Remove, []string{"1", "2", "4", "5"}) || d.Tripped {
		t.Errorf("release 7: %+v", d)
	}
	d = decideRemovals(known, []string{"1", "2", "3"}, map[uint64]bool{9: true}, 0.1)
	if !reflect.DeepEqual(d.Remove, []string{"3"}) || d.Tripped {
		t.Errorf("release 9: %+v", d)
	}
	// A release of a later trip (a huge number, say) releases nothing held by earlier ones.
	if d := decideRemovals(known, []string{"1", "2", "3"}, map[uint64]bool{1 << 62: true}, 0.1); len(d.Remove) != 0 {
		t.Errorf("release of a later trip: %+v", d)
	}
}

func TestParseReleaseValue(t *testing.T) {
	const id = "0123456789abcdef"
	if trip, err := ParseReleaseValue(" "+ReleaseValue(id, 12)+" ", id); err != nil || trip != 12 {
		t.Fatalf("ParseReleaseValue(%q) = %d, %v", ReleaseValue(id, 12), trip, err)
	}
	for _, v := range []string{"12", "all", id + "/0", id + "/-1", id + "/x", "fedcba9876543210/12", "/12"} {
		if _, err := ParseReleaseValue(v, id); err == nil {
			t.Errorf("ParseReleaseValue(%q) accepted", v)
		}
	}
}

func TestHashAttributes(t *testing.T) {
	base := map[string]any{"a": "x", "n": float64(3), "l": []any{"p", true, nil}, "m": map[string]any{"k": "v"}}
	same := map[string]any{"m": map[string]any{"k": "v"}, "l": []any{"p", true, nil}, "n": float64(3), "a": "x"}
	if hashAttributes(base) != hashAttributes(same) {
		t.Fatal("key order changed the hash")
	}
	if hashAttributes(nil) != hashAttributes(map[string]any{}) {
		t.Fatal("nil and empty attributes differ")
	}
	for name, other := range map[string]map[string]any{
		"value":      {"a": "y", "n": float64(3), "l": []any{"p", true, nil}, "m": map[string]any{"k": "v"}},
		"number":     {"a": "x", "n": float64(4), "l": []any{"p", true, nil}, "m": map[string]any{"k": "v"}},
		"list":       {"a": "x", "n": float64(3), "l": []any{"p", false, nil}, "m": map[string]any{"k": "v"}},
		"nested":     {"a": "x", "n": float64(3), "l": []any{"p", true, nil}, "m": map[string]any{"k": "w"}},
		"type":       {"a": "x", "n": "3", "l": []any{"p", true, nil}, "m": map[string]any{"k": "v"}},
		"extra key":  {"a": "x", "n": float64(3), "l": []any{"p", true, nil}, "m": map[string]any{"k": "v"}, "z": nil},
		"boundaries": {"a": "xn", "l": []any{"p", true, nil}, "m": map[string]any{"k": "v"}},
	} {
		if hashAttributes(other) == hashAttributes(base) {
			t.Errorf("%s: different attributes, same hash", name)
		}
	}
}
