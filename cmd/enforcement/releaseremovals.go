package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// Held removals live in source-scanner's inventory bucket (events.BucketInventory): one record
// per cluster under "clusters.<source id>.<key>", whose heldAt is the scan (the trip) that held
// its removal, and one record per source under "sources.<source id>". These are the fields of
// those records release-removals reads (services/source-scanner/internal/scanner: record,
// sourceMeta).
type (
	inventoryCluster struct {
		Cluster struct {
			Name string `json:"name"`
		} `json:"cluster"`
		Event  string `json:"event,omitempty"`
		HeldAt uint64 `json:"heldAt,omitempty"`
	}
	inventorySource struct {
		Source   events.SourceRef `json:"source"`
		Released []uint64         `json:"released,omitempty"`
	}
)

// heldTrip is one trip of a source's removal breaker: the clusters one scan held.
type heldTrip struct {
	Source events.SourceRef
	Trip   uint64
	// Clusters are the held clusters' names, sorted.
	Clusters []string
	// Released is set when a release was recorded and waits for the next complete scan.
	Released bool
}

// runReleaseRemovals lists the trips that hold removals and the held rule edits (no arguments),
// or releases one trip (<source id> <trip>) by publishing io.enforcement.removals.released.v1,
// after checking in the inventory that the trip holds removals (source-scanner records the
// release and removes, at its next complete scan, the clusters of that trip that are still
// missing; nothing else), or one rule edit (<namespace>/<name> generation/<n>: releaseRuleEdit).
func runReleaseRemovals(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) != 0 && len(args) != 2 {
		return fmt.Errorf("release-removals: want no arguments (list) or <source id> <trip>, got %q\n%s", args, usage)
	}
	ruleEdit := len(args) == 2 && strings.HasPrefix(args[1], ruleReleasePrefix)
	var trip uint64
	if len(args) == 2 && !ruleEdit {
		var err error
		if trip, err = strconv.ParseUint(args[1], 10, 64); err != nil || trip == 0 {
			return fmt.Errorf("release-removals: trip %q: want the scan number a RemovalsHeld message names", args[1])
		}
	}
	nc, js, err := connectJetStream(getenv)
	if err != nil {
		return err
	}
	defer nc.Close()
	if ruleEdit {
		return releaseRuleEdit(ctx, js, args[0], args[1], getenv, stdout)
	}
	kv, err := js.KeyValue(ctx, events.BucketInventory)
	if err != nil {
		return fmt.Errorf("open bucket %s: %w", events.BucketInventory, err)
	}
	sourceID := ""
	if len(args) == 2 {
		sourceID = args[0]
	}
	trips, err := heldTrips(ctx, kv, sourceID)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		edits, err := heldRuleEdits(ctx, js)
		if err != nil {
			return err
		}
		if len(trips) > 0 || len(edits) == 0 {
			if err := printTrips(stdout, trips); err != nil {
				return err
			}
		}
		if len(edits) == 0 {
			return nil
		}
		return printRuleEdits(stdout, edits)
	}
	return releaseTrip(ctx, js, trips, sourceID, trip, getenv, stdout)
}

// releaseTrip publishes the release of one held trip.
func releaseTrip(ctx context.Context, js jetstream.JetStream, trips []heldTrip, sourceID string, trip uint64, getenv func(string) string, stdout io.Writer) error {
	i := slices.IndexFunc(trips, func(t heldTrip) bool { return t.Trip == trip })
	if i < 0 {
		held := make([]string, 0, len(trips))
		for _, t := range trips {
			held = append(held, strconv.FormatUint(t.Trip, 10))
		}
		if len(held) == 0 {
			return fmt.Errorf("release-removals: source %s holds no removals (run release-removals without arguments to list the held trips)", sourceID)
		}
		return fmt.Errorf("release-removals: trip %d of source %s holds no removal; its held trips are %s", trip, sourceID, strings.Join(held, ", "))
	}
	t := trips[i]
	host, _ := os.Hostname()
	e := &events.RemovalsReleased{Source: t.Source, Trip: t.Trip, Clusters: t.Clusters,
		By: strings.Trim(getenv("USER")+"@"+host, "@")}
	if err := events.NewPublisher(js, "/enforcement/cli").PublishAll(ctx, []events.Event{e}); err != nil {
		return fmt.Errorf("publish release of trip %d: %w", trip, err)
	}
	fmt.Fprintf(stdout, "Released trip %d of source %s/%s (%d clusters: %s) as event %s; source-scanner removes those still missing at its next complete scan\n",
		t.Trip, t.Source.Kind, t.Source.ID, len(t.Clusters), strings.Join(t.Clusters, ", "), e.ID())
	return nil
}

// printTrips writes the held trips as a table, with the command that releases each.
func printTrips(stdout io.Writer, trips []heldTrip) error {
	if len(trips) == 0 {
		fmt.Fprintln(stdout, "No removals are held.")
		return nil
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SOURCE\tKIND\tTRIP\tHELD\tCLUSTERS\tRELEASE")
	for _, t := range trips {
		release := fmt.Sprintf("enforcement release-removals %s %d", t.Source.ID, t.Trip)
		if t.Released {
			release = "released; waits for the next complete scan"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%s\n", t.Source.ID, t.Source.Kind, t.Trip, len(t.Clusters), fewClusters(t.Clusters, 3), release)
	}
	return w.Flush()
}

// fewClusters joins the first n names and says how many more there are.
func fewClusters(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// heldTrips reads the trips that hold removals from the inventory, of one source or (sourceID
// empty) of all, ordered by source and trip.
func heldTrips(ctx context.Context, kv jetstream.KeyValue, sourceID string) ([]heldTrip, error) {
	pattern := "clusters.>"
	if sourceID != "" {
		if strings.ContainsAny(sourceID, ".*> ") {
			return nil, fmt.Errorf("release-removals: source id %q: want the 16 hex digits a RemovalsHeld message names", sourceID)
		}
		pattern = "clusters." + sourceID + ".>"
	}
	byTrip := map[string]map[uint64][]string{} // source id → trip → cluster names
	err := readBucket(ctx, kv, pattern, func(key string, value []byte) error {
		var r inventoryCluster
		if err := json.Unmarshal(value, &r); err != nil {
			return fmt.Errorf("read inventory record %s: %w", key, err)
		}
		if r.HeldAt == 0 || r.Event == "gone" {
			return nil
		}
		id := strings.Split(key, ".")[1]
		if byTrip[id] == nil {
			byTrip[id] = map[uint64][]string{}
		}
		byTrip[id][r.HeldAt] = append(byTrip[id][r.HeldAt], r.Cluster.Name)
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []heldTrip
	for id, trips := range byTrip {
		src, err := sourceRecord(ctx, kv, id)
		if err != nil {
			return nil, err
		}
		for trip, names := range trips {
			slices.Sort(names)
			out = append(out, heldTrip{Source: src.Source, Trip: trip, Clusters: names, Released: slices.Contains(src.Released, trip)})
		}
	}
	slices.SortFunc(out, func(a, b heldTrip) int {
		return cmp.Or(cmp.Compare(a.Source.ID, b.Source.ID), cmp.Compare(a.Trip, b.Trip))
	})
	return out, nil
}

// sourceRecord reads a source's record from the inventory.
func sourceRecord(ctx context.Context, kv jetstream.KeyValue, id string) (inventorySource, error) {
	var src inventorySource
	e, err := kv.Get(ctx, "sources."+id)
	if err != nil {
		return src, fmt.Errorf("read inventory of source %s: %w", id, err)
	}
	if err := json.Unmarshal(e.Value(), &src); err != nil {
		return src, fmt.Errorf("read inventory of source %s: %w", id, err)
	}
	return src, nil
}

// readBucket calls fn for every current entry of kv whose key matches pattern.
func readBucket(ctx context.Context, kv jetstream.KeyValue, pattern string, fn func(key string, value []byte) error) error {
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w, err := kv.Watch(wctx, pattern, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("read bucket %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-wctx.Done():
			return fmt.Errorf("read bucket %s: %w", kv.Bucket(), wctx.Err())
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return errors.New("read bucket " + kv.Bucket() + ": watcher closed")
			case e == nil:
				return nil // caught up
			}
			if err := fn(e.Key(), e.Value()); err != nil {
				return err
			}
		}
	}
}
