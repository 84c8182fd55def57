package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// Explain and events read the ENFORCEMENT stream, where every decision is an event, through an
// ordered consumer whose subject filters keep only the cluster's or the rule's events (the
// subjects carry both: events.SubjectFilters derives the filters from the catalog), so the
// server, not this command, skips the rest of the fleet.

// streamQuery is what to read: the subject filters, and a test on the decoded event for what a
// subject cannot tell (a source's held removals name the cluster in the payload).
type streamQuery struct {
	filters []string
	keep    func(events.Event) bool
}

// clusterQuery selects the events about one cluster: every type whose subject has the cluster
// name, and the source and release events that name it among held removals.
func clusterQuery(name string) (streamQuery, error) {
	filters, err := events.SubjectFilters(nil, map[string]string{"cluster": name})
	if err != nil {
		return streamQuery{}, err
	}
	held, err := events.SubjectFilters([]string{(&events.SourceDegraded{}).Type(), (&events.RemovalsReleased{}).Type(),
		(&events.RuleRemovalsReleased{}).Type()}, nil)
	if err != nil {
		return streamQuery{}, err
	}
	return streamQuery{filters: append(filters, held...), keep: func(e events.Event) bool {
		switch e := e.(type) {
		case *events.SourceDegraded:
			return slices.Contains(e.HeldRemovals, name)
		case *events.RemovalsReleased:
			return slices.Contains(e.Clusters, name)
		case *events.RuleRemovalsReleased:
			return slices.Contains(e.Clusters, name)
		}
		return true
	}}, nil
}

// ruleQuery selects the events about one rule: every type whose subject has the rule's
// namespace and name (intents, outcomes, triggers, releases).
func ruleQuery(key string) (streamQuery, error) {
	ns, name, ok := strings.Cut(key, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return streamQuery{}, fmt.Errorf("rule %q: want NAMESPACE/NAME", key)
	}
	filters, err := events.SubjectFilters(nil, map[string]string{"ruleNamespace": ns, "rule": name})
	return streamQuery{filters: filters}, err
}

// runExplain prints the history of decisions about a cluster or a rule, oldest first; then, for
// a cluster, which rules match it now and why the others do not (printRulesNow), for a rule, which
// clusters it matches now and why not the others (printClustersNow; --all lists every cluster of a
// long list).
func runExplain(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	all := false
	var rest []string
	for _, a := range args {
		if a == "--all" || a == "-all" {
			all = true
		} else {
			rest = append(rest, a)
		}
	}
	args = rest
	if len(args) != 2 || (args[0] != "cluster" && args[0] != "rule") {
		return fmt.Errorf("explain: want cluster NAME or rule [--all] NAMESPACE/NAME\n%s", usage)
	}
	if all && args[0] != "rule" {
		return fmt.Errorf("explain: --all goes with explain rule\n%s", usage)
	}
	var q streamQuery
	var err error
	if args[0] == "cluster" {
		q, err = clusterQuery(args[1])
	} else {
		q, err = ruleQuery(args[1])
	}
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	nc, js, err := connectJetStream(getenv)
	if err != nil {
		return err
	}
	defer nc.Close()
	n, err := readStream(ctx, js, q, time.Time{}, false, func(seq uint64, at time.Time, e events.Event) {
		fmt.Fprintln(stdout, historyLine(seq, at, e))
	})
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	if n == 0 {
		fmt.Fprintf(stdout, "No event about %s %s in the stream %s (it keeps events for its max age, 30 days by default).\n", args[0], args[1], events.StreamName)
	}
	if args[0] == "cluster" {
		printRulesNow(ctx, nc, args[1], stdout)
		return nil
	}
	ns, name, _ := strings.Cut(args[1], "/") // ruleQuery checked the shape
	printClustersNow(ctx, nc, ns, name, all, stdout)
	return nil
}

// printRulesNow asks the rule engine which live rules match the clusters named name now, and
// prints the section "Rules now:" after the history: per cluster of that name, one line per rule.
// When the rule engine cannot answer, the section says so and why; the history printed above
// stands, so the command still succeeds.
func printRulesNow(ctx context.Context, nc *nats.Conn, name string, w io.Writer) {
	var res events.ExplainClusterResult
	if err := askRuleEngine(ctx, nc, events.ExplainClusterSubject, events.ExplainClusterRequest{Cluster: name}, &res); err != nil {
		fmt.Fprintf(w, "\nRules now: unavailable, the history above is all there is: %v\n", err)
		return
	}
	if len(res.Clusters) == 0 {
		fmt.Fprintf(w, "\nRules now: no source lists a cluster named %s in the rule engine's view, so no rule matches it.\n", name)
		return
	}
	fmt.Fprintf(w, "\nRules now:\n")
	for _, c := range res.Clusters {
		eligible := "eligible"
		if !c.Eligible {
			eligible = "not eligible"
		}
		fmt.Fprintf(w, "Cluster %s of source %s %s: %s (state %s)%s\n", name, c.Source.Kind, c.Source.ID, eligible, valueOr(c.State, "-"), labelList(c.Labels))
		if len(c.Rules) == 0 {
			fmt.Fprintf(w, "  no ClusterRule in the namespaces the rule engine watches\n")
		}
		for _, v := range c.Rules {
			fmt.Fprintf(w, "  %s\n", verdictLine(v))
		}
	}
}

// verdictLine is one rule's verdict on a cluster: "ns/name: matches, installs a, b", or
// "ns/name: does not match: reason", with what the rule's records still hold there.
func verdictLine(v events.RuleVerdict) string {
	if v.Matches {
		return fmt.Sprintf("%s: matches, installs %s", v.Rule, strings.Join(v.Installs, ", "))
	}
	line := fmt.Sprintf("%s: does not match: %s", v.Rule, v.Reason)
	if len(v.Installed) > 0 {
		line += "; still has " + strings.Join(v.Installed, ", ")
	}
	return line
}

// longClusterList is how many clusters explain rule lists one per line; beyond it, without
// --all, it prints the matched count and the others grouped by reason, with a few names each.
const longClusterList = 50

// namesPerReason is how many cluster names a group of a long list shows.
const namesPerReason = 5

// printClustersNow asks the rule engine which clusters of its source the live rule ns/name
// matches now, and prints the section "Clusters now:" after the history: one line per cluster
// ("prod-a: matches", "dev-b: does not match: reason"), or, for more than longClusterList
// clusters without all, the groups by reason; then the clusters a tenant's rule may not target,
// counted, and the rule edit breaker's hold. When the rule engine cannot answer, the section says
// so and why; a rule the API server does not have is said to be gone. The history printed above
// stands either way.
func printClustersNow(ctx context.Context, nc *nats.Conn, ns, name string, all bool, w io.Writer) {
	var res events.ExplainRuleResult
	err := askRuleEngine(ctx, nc, events.ExplainRuleSubject, events.ExplainRuleRequest{Namespace: ns, Name: name}, &res)
	var nf notFoundError
	switch {
	case errors.As(err, &nf):
		fmt.Fprintf(w, "\nClusters now: none, there is no ClusterRule %s/%s on the API server.\n", ns, name)
		return
	case err != nil:
		fmt.Fprintf(w, "\nClusters now: unavailable, the history above is all there is: %v\n", err)
		return
	case res.Inactive != "":
		fmt.Fprintf(w, "\nClusters now: none, %s.\n", res.Inactive)
		fmt.Fprintf(w, "To check an edit of the rule before applying it: enforcement preview -f <the edited manifest>\n")
		return
	}
	renderFails := map[string]string{}
	for _, te := range res.TemplateErrors {
		renderFails[te.Cluster] = te.Message
	}
	total, matching := len(res.Clusters), 0
	for _, c := range res.Clusters {
		if c.Matches {
			matching++
		}
	}
	for _, wc := range res.Withheld {
		total += wc.Count
	}
	fmt.Fprintf(w, "\nClusters now: rule %s (generation %d) matches %d of the %d cluster(s) of source %s %s\n",
		res.Rule, res.Rule.Generation, matching, total, res.Source.Kind, res.Source.ID)
	defer printRollout(w, res.Rollout)
	if len(res.Clusters) <= longClusterList || all {
		for _, c := range res.Clusters {
			fmt.Fprintf(w, "  %s: %s\n", c.Name, clusterVerdict(c, renderFails))
		}
	} else {
		printClusterGroups(w, res.Clusters, renderFails)
		fmt.Fprintf(w, "  (enforcement explain rule --all %s/%s lists each cluster)\n", ns, name)
	}
	for _, wc := range res.Withheld {
		fmt.Fprintf(w, "  %d cluster(s): does not match: %s (not named: the rule is outside the operator's namespace and may not target them)\n", wc.Count, wc.Reason)
	}
	if res.Held != nil {
		fmt.Fprintf(w, "Held removals: %s\n", res.Held.Message)
		if len(res.Held.Clusters) > 0 && (len(res.Held.Clusters) <= longClusterList || all) {
			fmt.Fprintf(w, "  held: %s\n", strings.Join(res.Held.Clusters, ", "))
		}
	}
	if res.Held != nil || len(res.TemplateErrors) > 0 {
		fmt.Fprintf(w, "To check an edit of the rule before applying it: enforcement preview -f <the edited manifest>\n")
	}
}

// clusterVerdict is what a rule does to one cluster of its source now: "matches" (with its
// render's failure, if any: the cluster keeps what it has), or "does not match: reason".
func clusterVerdict(c events.PreviewCluster, renderFails map[string]string) string {
	if c.Generation > 0 {
		step := ""
		if c.Step != "" {
			step = ", rollout step " + c.Step
		}
		return clusterVerdictNow(c, renderFails) + fmt.Sprintf(" (runs generation %d%s)", c.Generation, step)
	}
	return clusterVerdictNow(c, renderFails)
}

// clusterVerdictNow is clusterVerdict without the rollout's part.
func clusterVerdictNow(c events.PreviewCluster, renderFails map[string]string) string {
	switch {
	case !c.Matches:
		return "does not match: " + c.Reason
	case renderFails[c.Name] != "":
		return "matches, but its render fails, so it keeps what it has: " + renderFails[c.Name]
	}
	return "matches"
}

// printClusterGroups prints a long list of clusters as groups with the same verdict, the largest
// first, each with its count and the first namesPerReason names.
func printClusterGroups(w io.Writer, clusters []events.PreviewCluster, renderFails map[string]string) {
	groups := map[string][]string{}
	for _, c := range clusters {
		v := clusterVerdict(c, renderFails)
		groups[v] = append(groups[v], c.Name)
	}
	verdicts := slices.Collect(maps.Keys(groups))
	slices.SortFunc(verdicts, func(a, b string) int {
		if d := len(groups[b]) - len(groups[a]); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	for _, v := range verdicts {
		names := groups[v]
		shown := strings.Join(names[:min(len(names), namesPerReason)], ", ")
		if len(names) > namesPerReason {
			shown += ", ..."
		}
		fmt.Fprintf(w, "  %d cluster(s): %s (%s)\n", len(names), v, shown)
	}
}

// runEvents prints the stored events that pass the filters, then, with --follow, the new ones
// as they come.
func runEvents(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("events", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	follow := fs.Bool("follow", false, "keep printing new events")
	cluster := fs.String("cluster", "", "only events about this cluster")
	rule := fs.String("rule", "", "only events about this rule (NAMESPACE/NAME)")
	since := fs.Duration("since", 0, "only events of this last duration")
	var typeNames []string
	fs.Func("type", "only events of this type (repeatable; install.succeeded or the full type name)", func(v string) error {
		t, err := events.TypeNamed(v)
		typeNames = append(typeNames, t)
		return err
	})
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("events: %w\n%s", err, usage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("events: unexpected arguments %q\n%s", fs.Args(), usage)
	}
	bind := map[string]string{}
	if *cluster != "" {
		bind["cluster"] = *cluster
	}
	if *rule != "" {
		ns, name, ok := strings.Cut(*rule, "/")
		if !ok || ns == "" || name == "" {
			return fmt.Errorf("events: --rule %q: want NAMESPACE/NAME", *rule)
		}
		bind["ruleNamespace"], bind["rule"] = ns, name
	}
	filters, err := events.SubjectFilters(typeNames, bind)
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	if len(filters) == 0 {
		return fmt.Errorf("events: no event type of %v has the keys %v in its subject", typeNames, slices.Sorted(maps.Keys(bind)))
	}
	nc, js, err := connectJetStream(getenv)
	if err != nil {
		return err
	}
	defer nc.Close()
	// --follow alone starts at the next event, as `kubectl get events --watch-only` would: the
	// stream keeps 30 days. --since reads back that far first.
	var from time.Time
	switch {
	case *since > 0:
		from = time.Now().Add(-*since)
	case *follow:
		from = time.Now()
	}
	_, err = readStream(ctx, js, streamQuery{filters: filters}, from, *follow, func(seq uint64, at time.Time, e events.Event) {
		fmt.Fprintln(stdout, historyLine(seq, at, e))
	})
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	return nil
}

// readStream calls show for each event of the stream that q selects, in stream order, from the
// start (or from the time from). Without follow it returns once it has read what was stored when
// it started; with follow it keeps reading until ctx ends. It returns how many it showed. A
// message that does not decode is shown as such, not skipped.
func readStream(ctx context.Context, js jetstream.JetStream, q streamQuery, from time.Time, follow bool, show func(seq uint64, at time.Time, e events.Event)) (int, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: q.filters, DeliverPolicy: jetstream.DeliverAllPolicy}
	if !from.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &from
	}
	cons, err := js.OrderedConsumer(ctx, events.StreamName, cfg)
	if err != nil {
		return 0, fmt.Errorf("read stream %s: %w", events.StreamName, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("read stream %s: %w", events.StreamName, err)
	}
	if info.NumPending == 0 && !follow {
		return 0, nil
	}
	it, err := cons.Messages()
	if err != nil {
		return 0, fmt.Errorf("read stream %s: %w", events.StreamName, err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	n := 0
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return n, nil
			}
			return n, fmt.Errorf("read stream %s: %w", events.StreamName, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return n, err
		}
		e, _, err := events.Decode(m.Subject(), m.Headers(), m.Data())
		switch {
		case err != nil:
			show(meta.Sequence.Stream, meta.Timestamp, undecodable{subject: m.Subject(), err: err})
			n++
		case q.keep == nil || q.keep(e):
			show(meta.Sequence.Stream, meta.Timestamp, e)
			n++
		}
		if meta.NumPending == 0 && !follow {
			return n, nil
		}
	}
}

// undecodable stands for a stored message that is not a valid event, so that it gets a line.
type undecodable struct {
	events.Event
	subject string
	err     error
}

// historyLine is one event as a line of a history: time, stream sequence, and what happened.
func historyLine(seq uint64, at time.Time, e events.Event) string {
	return fmt.Sprintf("%s  #%-6d %s", at.UTC().Format("2006-01-02 15:04:05"), seq, explainLine(e))
}

// explainLine says what an event means in one line. It is narrate's line where narrate has one,
// with the labels of a cluster event added (what rules select on); the events narrate leaves
// out as they happen get a line too, since a history must show every decision.
func explainLine(e events.Event) string {
	switch e := e.(type) {
	case undecodable:
		return "Undecodable event on " + e.subject + ": " + e.err.Error()
	case *events.ClusterAppeared:
		return narrateEvent(e) + labelList(e.Cluster.Labels)
	case *events.ClusterUpdated:
		return narrateEvent(e) + labelList(e.Cluster.Labels)
	case *events.InstallIntent:
		return fmt.Sprintf("Rule %s (generation %d) matched %s: install %s", e.Rule, e.Rule.Generation, e.Cluster.Name, e.Enforcement.Name)
	case *events.UninstallIntent:
		return fmt.Sprintf("Rule %s (generation %d) lets go of %s on %s: %s, deletionPolicy %s", e.Rule, e.Rule.Generation, e.Enforcement, e.Cluster.Name, e.Reason, e.DeletionPolicy)
	case *events.UninstallDone:
		if !e.Deleted {
			return fmt.Sprintf("Uninstall of %s on %s done: Application %s was not there", e.Enforcement, e.Cluster, e.Application)
		}
	case *events.TriggerAttempted:
		if !e.WillRetry {
			return fmt.Sprintf("%s webhook for %s on %s: attempt %d %s", e.Phase, e.Enforcement, e.Cluster, e.Attempt, e.Result)
		}
	case *events.SourceDegraded:
		line := narrateEvent(e)
		if len(e.HeldRemovals) > 0 {
			line += "; held removals: " + strings.Join(e.HeldRemovals, ", ")
		}
		return line
	case *events.ComplianceChanged:
		return fmt.Sprintf("Compliance of %s is now %s (was %s): %d of %d policies not compliant", e.Cluster, e.Value, valueOr(e.Previous, "-"), len(e.NonCompliantPolicies), e.Policies)
	case *events.ClaimUpdated:
		return fmt.Sprintf("ClusterClaim %s of %s set to %s (was %s)", e.Claim, e.Cluster, e.Value, valueOr(e.Previous, "-"))
	}
	if line := narrateEvent(e); line != "" {
		return line
	}
	return e.Type()
}

// labelList is ", labels k=v,..." in key order; "" without labels.
func labelList(labels map[string]string) string {
	if len(labels) == 0 {
		return ""
	}
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		kv = append(kv, k+"="+labels[k])
	}
	return "; labels " + strings.Join(kv, ",")
}
