package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// Held rule edits live in rule-engine's state bucket (events.BucketRuleEngineState): one record
// per rule under "held.<base64 namespace/name>", the generation whose selection removals the
// rule edit breaker holds and the held clusters (services/rule-engine: heldRemovals).
type heldRuleEdit struct {
	Rule       string            `json:"-"` // namespace/name, from the key
	Generation int64             `json:"generation"`
	Clusters   map[string]string `json:"clusters"` // cluster id -> name
}

// ruleReleasePrefix begins the second argument of a rule edit's release, as the value of the
// rule's release annotation does.
const ruleReleasePrefix = "generation/"

// heldRuleEdits reads the holds of rule-engine's rule edit breaker, ordered by rule.
func heldRuleEdits(ctx context.Context, js jetstream.JetStream) ([]heldRuleEdit, error) {
	var out []heldRuleEdit
	err := readRuleRecords(ctx, js, "held", func(rule string, value []byte) error {
		h := heldRuleEdit{Rule: rule}
		if err := json.Unmarshal(value, &h); err != nil {
			return fmt.Errorf("read held rule edit of rule %s: %w", rule, err)
		}
		out = append(out, h)
		return nil
	})
	return out, err
}

// readRuleRecords calls fn, in the order of the rules, with each record rule-engine keeps per
// rule in its state bucket (events.BucketRuleEngineState) under "<kind>.<base64 namespace/name>"
// and the rule's namespace/name.
func readRuleRecords(ctx context.Context, js jetstream.JetStream, kind string, fn func(rule string, value []byte) error) error {
	kv, err := js.KeyValue(ctx, events.BucketRuleEngineState)
	if err != nil {
		return fmt.Errorf("open bucket %s: %w", events.BucketRuleEngineState, err)
	}
	type record struct {
		rule  string
		value []byte
	}
	var records []record
	err = readBucket(ctx, kv, kind+".>", func(key string, value []byte) error {
		rule, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(key, kind+"."))
		if err != nil {
			return fmt.Errorf("read %s: %w", key, err)
		}
		records = append(records, record{string(rule), value})
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(records, func(a, b record) int { return strings.Compare(a.rule, b.rule) })
	for _, r := range records {
		if err := fn(r.rule, r.value); err != nil {
			return err
		}
	}
	return nil
}

// printRuleEdits writes the held rule edits as a table, with the command that releases each.
func printRuleEdits(stdout io.Writer, edits []heldRuleEdit) error {
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "RULE\tGENERATION\tHELD\tCLUSTERS\tRELEASE")
	for _, h := range edits {
		names := slices.Sorted(maps.Values(h.Clusters))
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\tenforcement release-removals %s %s%d\n", h.Rule, h.Generation, len(names), fewClusters(names, 3),
			h.Rule, ruleReleasePrefix, h.Generation)
	}
	return w.Flush()
}

// releaseRuleEdit publishes the release of the removals one rule generation holds
// (io.enforcement.rule.removals.released.v1), after checking in rule-engine's state that it
// holds them. rule is namespace/name, generation "generation/<n>".
func releaseRuleEdit(ctx context.Context, js jetstream.JetStream, rule, generation string, getenv func(string) string, stdout io.Writer) error {
	ns, name, ok := strings.Cut(rule, "/")
	g, err := strconv.ParseInt(strings.TrimPrefix(generation, ruleReleasePrefix), 10, 64)
	if !ok || ns == "" || name == "" || err != nil || g <= 0 {
		return fmt.Errorf("release-removals: %s %s: want <namespace>/<name> generation/<n>, as a rule's RemovalsHeld message names them", rule, generation)
	}
	edits, err := heldRuleEdits(ctx, js)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(edits, func(h heldRuleEdit) bool { return h.Rule == rule })
	if i < 0 {
		return fmt.Errorf("release-removals: rule %s holds no removals (run release-removals without arguments to list them)", rule)
	}
	h := edits[i]
	if h.Generation != g {
		return fmt.Errorf("release-removals: generation %d of rule %s holds no removal; generation %d does", g, rule, h.Generation)
	}
	names := slices.Sorted(maps.Values(h.Clusters))
	host, _ := os.Hostname()
	e := &events.RuleRemovalsReleased{Rule: events.RuleRef{Namespace: ns, Name: name, Generation: g}, Clusters: names,
		By: strings.Trim(getenv("USER")+"@"+host, "@")}
	if err := events.NewPublisher(js, "/enforcement/cli").PublishAll(ctx, []events.Event{e}); err != nil {
		return fmt.Errorf("publish release of rule %s generation %d: %w", rule, g, err)
	}
	fmt.Fprintf(stdout, "Released generation %d of rule %s (%d clusters: %s) as event %s; rule-engine uninstalls them if that generation is still the rule's\n",
		g, rule, len(names), fewClusters(names, 3), e.ID())
	return nil
}
