package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"sigs.k8s.io/yaml"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// previewTimeout bounds the wait for the rule engine's answer: it reads its state and renders
// the rule for every cluster of its source, and is given two minutes for that itself.
const previewTimeout = 150 * time.Second

// runPreview asks the rule engine what applying a ClusterRule manifest would do (see
// services/rule-engine preview.go) and prints it; nothing is written anywhere.
func runPreview(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("preview", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	file := fs.String("f", "", "the ClusterRule manifest (- for standard input)")
	output := fs.String("o", "", "output format: yaml or json (default: text for people)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("preview: %w\n%s", err, usage)
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("preview: unexpected arguments %q\n%s", fs.Args(), usage)
	case *file == "":
		return fmt.Errorf("preview: -f FILE is required\n%s", usage)
	case *output != "" && *output != "yaml" && *output != "json":
		return fmt.Errorf("preview: -o %q: want yaml or json", *output)
	}
	var manifest []byte
	var err error
	if *file == "-" {
		manifest, err = io.ReadAll(stdin)
	} else {
		manifest, err = os.ReadFile(*file)
	}
	if err != nil {
		return fmt.Errorf("preview: read %s: %w", *file, err)
	}
	nc, err := connectNATS(natsURL(getenv), getenv, nats.Name("enforcement-preview"))
	if err != nil {
		return err
	}
	defer nc.Close()
	res, err := requestPreview(ctx, nc, manifest)
	if err != nil {
		return err
	}
	switch *output {
	case "json":
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	case "yaml":
		b, err := yaml.Marshal(res)
		if err != nil {
			return err
		}
		_, err = stdout.Write(b)
		return err
	}
	return printPreview(stdout, res)
}

// requestPreview sends the manifest to the rule engine's preview endpoint and decodes the answer.
func requestPreview(ctx context.Context, nc *nats.Conn, manifest []byte) (*events.PreviewResult, error) {
	var res events.PreviewResult
	if err := askRuleEngine(ctx, nc, events.PreviewSubject, events.PreviewRequest{Rule: string(manifest)}, &res); err != nil {
		return nil, fmt.Errorf("preview: %w", err)
	}
	return &res, nil
}

// notFoundError is the rule engine's answer that what the request names does not exist (code
// 404); its message says what.
type notFoundError struct{ message string }

func (e notFoundError) Error() string { return e.message }

// askRuleEngine sends req, as JSON, to the rule engine's endpoint subject and decodes its answer
// into res, within previewTimeout. Its errors say what a user can do: no rule engine answers, it
// refused the request (code 400: the reason alone), the request names nothing it knows (code
// 404: a notFoundError), or it could not answer.
func askRuleEngine(ctx context.Context, nc *nats.Conn, subject string, req, res any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, previewTimeout)
	defer cancel()
	msg, err := nc.RequestWithContext(ctx, subject, body)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("no rule engine answers on %s: is rule-engine running, in a version that serves it?", subject)
	case err != nil:
		return fmt.Errorf("ask the rule engine on %s: %w", subject, err)
	}
	if desc := msg.Header.Get(micro.ErrorHeader); desc != "" {
		switch msg.Header.Get(micro.ErrorCodeHeader) {
		case "400":
			return errors.New(desc)
		case "404":
			return notFoundError{desc}
		}
		return fmt.Errorf("the rule engine could not answer: %s", desc)
	}
	if err := json.Unmarshal(msg.Data, res); err != nil {
		return fmt.Errorf("decode the rule engine's answer: %w", err)
	}
	return nil
}

// printPreview writes the preview for a person: the clusters, then the Application changes with
// their diffs, then what would be held and which renders fail.
func printPreview(w io.Writer, res *events.PreviewResult) error {
	what := "new rule"
	if res.Existing && res.LiveGeneration == res.Rule.Generation {
		what = fmt.Sprintf("same spec as generation %d", res.LiveGeneration)
	} else if res.Existing {
		what = fmt.Sprintf("edit: generation %d -> %d", res.LiveGeneration, res.Rule.Generation)
	}
	fmt.Fprintf(w, "Rule %s (%s), source %s %s\n", res.Rule, what, res.Source.Kind, res.Source.ID)
	if err := printPreviewClusters(w, res); err != nil {
		return err
	}
	printRollout(w, res.Rollout)
	counts := map[string]int{}
	held, staged := 0, 0
	for _, c := range res.Changes {
		switch {
		case c.Held:
			held++
		case c.Staged:
			staged++
		default:
			counts[c.Action]++
		}
	}
	fmt.Fprintf(w, "\nApplications: %d to create, %d to update, %d to delete, %d held, %d unchanged\n",
		counts[events.PreviewCreate], counts[events.PreviewUpdate], counts[events.PreviewDelete], held, res.Unchanged)
	if staged > 0 {
		fmt.Fprintf(w, "  and %d change(s) later, as the rollout reaches their step\n", staged)
	}
	for _, c := range res.Changes {
		action := c.Action
		if c.Held {
			action = "held (would delete)"
		}
		switch {
		case c.Staged && c.Step == "":
			action = "when the rollout completes: " + action
		case c.Staged:
			action = "at step " + c.Step + ": " + action
		case res.Rollout != nil && c.Step != "":
			action = "now (step " + c.Step + "): " + action
		}
		line := fmt.Sprintf("  %s %s (cluster %s, enforcement %s)", action, c.Application, c.Cluster, c.Enforcement)
		if c.Action == events.PreviewDelete {
			line += fmt.Sprintf(": %s, deletionPolicy %s", c.Reason, c.DeletionPolicy)
		}
		fmt.Fprintln(w, line)
		if c.BeforeUnknown {
			fmt.Fprintln(w, "    (the spec it has now is no longer known: its render is not cached; the whole new spec follows)")
		}
		for _, l := range strings.Split(strings.TrimSuffix(c.Diff, "\n"), "\n") {
			if l != "" {
				fmt.Fprintln(w, "    "+l)
			}
		}
	}
	if res.Held != nil {
		fmt.Fprintf(w, "\nThe blast-radius guard would hold %d removal(s): %s\n", len(res.Held.Clusters), res.Held.Message)
	}
	if len(res.TemplateErrors) > 0 {
		fmt.Fprintf(w, "\nTemplate errors (these clusters would keep what they have):\n")
		for _, te := range res.TemplateErrors {
			fmt.Fprintf(w, "  %s: %s\n", te.Cluster, te.Message)
		}
	}
	fmt.Fprintln(w, "\nNothing was applied: kubectl apply -f the rule to make it so.")
	return nil
}

// printPreviewClusters writes the clusters of the rule's source, whether each matches and why
// not, and how many are not named (a rule outside OPERATOR_NAMESPACE and the clusters its grant
// does not let it target).
func printPreviewClusters(w io.Writer, res *events.PreviewResult) error {
	matching := 0
	for _, c := range res.Clusters {
		if c.Matches {
			matching++
		}
	}
	withheld := 0
	for _, wc := range res.Withheld {
		withheld += wc.Count
	}
	fmt.Fprintf(w, "\nClusters: %d of %d match\n", matching, len(res.Clusters)+withheld)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range res.Clusters {
		mark := "match"
		if !c.Matches {
			mark = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", mark, c.Name, c.Reason)
	}
	for _, wc := range res.Withheld {
		fmt.Fprintf(tw, "  -\t%d not named\t%s\n", wc.Count, wc.Reason)
	}
	return tw.Flush()
}

// printRollout writes a rule's staged rollout: where it stands, and each step's clusters.
func printRollout(w io.Writer, ro *events.RolloutView) {
	if ro == nil {
		return
	}
	stable := "none: the clusters not reached yet keep what they have"
	if ro.StableGeneration > 0 {
		stable = fmt.Sprintf("generation %d, which the clusters not reached yet run", ro.StableGeneration)
	}
	fmt.Fprintf(w, "\nRollout of generation %d: %s", ro.Generation, ro.Phase)
	if ro.Step != "" {
		fmt.Fprintf(w, " at step %s", ro.Step)
	}
	fmt.Fprintf(w, "; stable %s\n", stable)
	if ro.Message != "" {
		fmt.Fprintf(w, "  %s\n", ro.Message)
	}
	for i, s := range ro.Steps {
		var gates []string
		if s.RequireApproval {
			gates = append(gates, "requires approval")
		}
		if s.BakeSeconds > 0 {
			gates = append(gates, "bakes "+(time.Duration(s.BakeSeconds)*time.Second).String())
		}
		gate := ""
		if len(gates) > 0 {
			gate = " (" + strings.Join(gates, ", ") + ")"
		}
		fmt.Fprintf(w, "  %d. %s%s: %s, %d cluster(s), %d updated, %d healthy", i+1, s.Name, gate, s.Phase, len(s.Clusters), s.Updated, s.Healthy)
		if len(s.Clusters) > 0 && len(s.Clusters) <= longClusterList {
			fmt.Fprintf(w, ": %s", strings.Join(s.Clusters, ", "))
		}
		fmt.Fprintln(w)
	}
}
