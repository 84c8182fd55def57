package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// Rollouts live in rule-engine's state bucket (events.BucketRuleEngineState): one record per
// rule with spec.rollout under "rollout.<base64 namespace/name>" (services/rule-engine:
// rolloutRecord). The command line reads the fields below; the rest (the specs) it leaves.
type rolloutRecord struct {
	Rule             string       `json:"-"` // namespace/name, from the key
	UID              string       `json:"uid"`
	Generation       int64        `json:"generation"`
	StableGeneration int64        `json:"stableGeneration"`
	StepNames        []string     `json:"stepNames"`
	Step             int          `json:"step"` // len(StepNames) once complete
	Phase            string       `json:"phase"`
	Awaiting         string       `json:"awaiting"`
	Approved         []string     `json:"approved"`
	StepStarted      time.Time    `json:"stepStarted"`
	BakeStarted      time.Time    `json:"bakeStarted"`
	Halted           *rolloutHalt `json:"halted"`
}

type rolloutHalt struct {
	Application string `json:"application"`
	Cluster     string `json:"cluster"`
	Message     string `json:"message"`
}

// Phases of a rollout, as the rule's status.rollout.phase says them.
const (
	rolloutAwaitingApproval = "AwaitingApproval"
	rolloutHalted           = "Halted"
	rolloutComplete         = "Complete"
)

// stepName is the current step's name, or "-" once complete.
func (r *rolloutRecord) stepName() string {
	if r.Step < 0 || r.Step >= len(r.StepNames) {
		return "-"
	}
	return r.StepNames[r.Step]
}

// readRollouts reads the rollouts of rule-engine's state, ordered by rule.
func readRollouts(ctx context.Context, js jetstream.JetStream) ([]rolloutRecord, error) {
	var out []rolloutRecord
	err := readRuleRecords(ctx, js, "rollout", func(rule string, value []byte) error {
		r := rolloutRecord{Rule: rule}
		if err := json.Unmarshal(value, &r); err != nil {
			return fmt.Errorf("read rollout of rule %s: %w", rule, err)
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// runRollouts lists every rollout, where it stands and what it waits for.
func runRollouts(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) != 0 {
		return fmt.Errorf("rollouts: takes no arguments, got %q\n%s", args, usage)
	}
	nc, js, err := connectJetStream(getenv)
	if err != nil {
		return err
	}
	defer nc.Close()
	rollouts, err := readRollouts(ctx, js)
	if err != nil {
		return err
	}
	return printRollouts(stdout, rollouts, time.Now())
}

// printRollouts writes the rollouts as a table; NEXT says what the rollout waits for, with the
// command that moves it where one does.
func printRollouts(stdout io.Writer, rollouts []rolloutRecord, now time.Time) error {
	if len(rollouts) == 0 {
		fmt.Fprintln(stdout, "No rollouts: no rule with spec.rollout has been edited since rule-engine started keeping them.")
		return nil
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "RULE\tGENERATION\tSTABLE\tPHASE\tSTEP\tNEXT")
	for _, r := range rollouts {
		stable := "-"
		if r.StableGeneration > 0 {
			stable = fmt.Sprint(r.StableGeneration)
		}
		step := fmt.Sprintf("%s (%d/%d)", r.stepName(), min(r.Step+1, len(r.StepNames)), len(r.StepNames))
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\n", r.Rule, r.Generation, stable, r.Phase, step, rolloutNext(&r, now))
	}
	return w.Flush()
}

// rolloutNext says what a rollout waits for.
func rolloutNext(r *rolloutRecord, now time.Time) string {
	switch {
	case r.Phase == rolloutComplete:
		return "nothing: every cluster runs generation " + fmt.Sprint(r.Generation)
	case r.Halted != nil:
		return fmt.Sprintf("halted by Application %s of cluster %s (%s): fix it and edit the rule, or edit it back", r.Halted.Application, r.Halted.Cluster, r.Halted.Message)
	case r.Phase == rolloutAwaitingApproval:
		return fmt.Sprintf("approval: enforcement approve %s %s", r.Rule, r.Awaiting)
	case !r.BakeStarted.IsZero():
		return fmt.Sprintf("the bake time, started %s ago", now.Sub(r.BakeStarted).Round(time.Second))
	case r.StepStarted.IsZero():
		return "the rule's source to list its clusters before the step starts (the rule's Ready condition says how far it is)"
	default:
		return "the step's Applications to report Healthy and Synced"
	}
}

// runApprove approves a step of a rule's rollout: the step it waits at, or the one named
// (ahead of the rollout reaching it). It checks the rollout in rule-engine's state first, and
// publishes io.enforcement.rule.rollout.approved for the generation being rolled out.
func runApprove(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) != 1 && len(args) != 2 {
		return fmt.Errorf("approve: want <namespace>/<name> [<step>], got %q\n%s", args, usage)
	}
	ns, name, ok := strings.Cut(args[0], "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("approve: rule %q: want <namespace>/<name>", args[0])
	}
	nc, js, err := connectJetStream(getenv)
	if err != nil {
		return err
	}
	defer nc.Close()
	rollouts, err := readRollouts(ctx, js)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(rollouts, func(r rolloutRecord) bool { return r.Rule == args[0] })
	if i < 0 {
		return fmt.Errorf("approve: rule %s has no rollout (run enforcement rollouts to list them)", args[0])
	}
	r := rollouts[i]
	step := ""
	if len(args) == 2 {
		step = args[1]
	}
	if err := approvable(&r, step); err != nil {
		return fmt.Errorf("approve: %w", err)
	}
	if step == "" {
		step = r.Awaiting
	}
	if slices.Contains(r.Approved, step) {
		fmt.Fprintf(stdout, "Step %s of generation %d of rule %s is approved already\n", step, r.Generation, r.Rule)
		return nil
	}
	host, _ := os.Hostname()
	e := &events.RolloutApproved{Rule: events.RuleRef{Namespace: ns, Name: name, UID: r.UID, Generation: r.Generation},
		Step: step, By: strings.Trim(getenv("USER")+"@"+host, "@")}
	if err := events.NewPublisher(js, "/enforcement/cli").PublishAll(ctx, []events.Event{e}); err != nil {
		return fmt.Errorf("publish approval of rule %s step %s: %w", r.Rule, step, err)
	}
	fmt.Fprintf(stdout, "Approved step %s of generation %d of rule %s as event %s\n", step, r.Generation, r.Rule, e.ID())
	return nil
}

// approvable checks that the rollout can take an approval of the step ("": the one it waits at).
func approvable(r *rolloutRecord, step string) error {
	of := fmt.Sprintf("the rollout of generation %d of rule %s", r.Generation, r.Rule)
	switch {
	case r.Phase == rolloutComplete:
		return fmt.Errorf("%s is complete", of)
	case r.Halted != nil:
		return fmt.Errorf("%s is halted by Application %s (%s); an approval does not resume it: fix the cause and edit the rule, or edit it back",
			of, r.Halted.Application, r.Halted.Message)
	case step == "" && r.Phase != rolloutAwaitingApproval:
		return fmt.Errorf("%s waits for no approval (%s at step %s); name a step to approve it ahead: %s",
			of, r.Phase, r.stepName(), strings.Join(r.StepNames[min(r.Step+1, len(r.StepNames)):], ", "))
	case step == "":
		return nil
	}
	i := slices.Index(r.StepNames, step)
	switch {
	case i < 0:
		return fmt.Errorf("%s has no step %q; its steps: %s", of, step, strings.Join(r.StepNames, ", "))
	case i < r.Step:
		return fmt.Errorf("step %s of %s is done already (the rollout is at step %s)", step, of, r.stepName())
	case i == r.Step && r.Phase != rolloutAwaitingApproval:
		return fmt.Errorf("step %s of %s is under way already (%s)", step, of, r.Phase)
	}
	return nil
}
