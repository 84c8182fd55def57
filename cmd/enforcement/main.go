// Command enforcement is the operator's command line:
//
//	enforcement local                    run the whole system on this machine (see local.go)
//	enforcement dead-letters [CONSUMER]  list the events a consumer gave up on, with the reason
//	enforcement dead-letters replay SEQ  publish a dead letter's event again after fixing the cause
//	enforcement watch                    narrate the events as they happen (see watch.go)
//	enforcement preview -f RULE.yaml     what applying a ClusterRule would do (see preview.go)
//	enforcement explain cluster|rule X   the history of decisions about X; then which rules match the cluster, or which clusters the rule matches, now (see explain.go)
//	enforcement events [--follow]        the events, one line each, filtered (see explain.go)
//	enforcement release-removals         list the trips of the removal breaker and the rule edits that hold removals
//	enforcement release-removals SOURCE TRIP  release the removals one trip holds
//	enforcement release-removals NAMESPACE/RULE generation/N  release the removals a rule edit holds
//	enforcement rollouts                 the staged rollouts of rules and where each stands (see rollouts.go)
//	enforcement approve NAMESPACE/RULE [STEP]  approve the step a rollout waits at, or one ahead
//	enforcement claim-writer CLUSTER     create a managed cluster's claim writer consumer (see claimwriter.go)
//	enforcement compose-init pki|seed    prepare the docker compose demo (see composeinit.go)
//
// It reads NATS_URL (default nats://127.0.0.1:4222), NATS_USER and NATS_PASSWORD (or NATS_CREDS)
// on a server with authorization (the operator's user of deploy/nats), and, for local,
// KUBECONFIG.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "enforcement:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  enforcement local                    run NATS, a local Kubernetes API, every hub service and a demo
  enforcement dead-letters [CONSUMER]  list dead letters (all consumers when none is named)
  enforcement dead-letters replay SEQ  publish the event of dead letter SEQ again
  enforcement watch                    print one line per event as it happens (NATS_URL)
  enforcement preview -f RULE.yaml [-o yaml|json]
                                       show what applying the ClusterRule would do, against the
                                       live inventory, without applying it: the clusters that
                                       match, the Applications created, updated or deleted (with
                                       a diff of each spec), the removals the guard would hold
                                       (asks rule-engine; -f - reads standard input)
  enforcement explain cluster NAME     the history of decisions about a cluster, oldest first:
                                       appeared, changed, matched by rules, installs, triggers,
                                       removals held and released (from the event stream); then
                                       "Rules now:", each live rule's verdict: matches and what
                                       it installs, or why not (asks rule-engine; when it cannot
                                       answer, a line says why and the command still succeeds)
  enforcement explain rule [--all] NAMESPACE/NAME
                                       the history of decisions of a rule, oldest first; then
                                       "Clusters now:", each cluster of its source: matches, or
                                       why not (over 50 clusters: grouped by reason, 5 names
                                       each; --all lists each one); clusters a tenant's rule may
                                       not target are counted, not named (asks rule-engine; when
                                       it cannot answer, a line says why and the command still
                                       succeeds)
  enforcement events [--follow] [--since 1h] [--cluster NAME] [--rule NAMESPACE/NAME] [--type T]...
                                       the stored events, one line each; --follow then prints new
                                       ones as they come (alone: only new ones); --type takes
                                       install.succeeded, intent.uninstall, ... (repeatable)
  enforcement release-removals         list the held removals: per source, each trip (the scan
                                       that held them) with its clusters (NATS_URL)
  enforcement release-removals SOURCE TRIP
                                       release the removals trip TRIP of source SOURCE holds
                                       (the RemovalsHeld message names both); check first that
                                       those clusters are really gone
  enforcement release-removals NAMESPACE/RULE generation/N
                                       release the uninstalls generation N of a rule held (its
                                       RemovalsHeld message names it); check first that the
                                       edit really means to let go of those clusters
  enforcement rollouts                 list the staged rollouts of rules (spec.rollout): the
                                       generation rolling out, the stable one, the phase, the
                                       step, and what it waits for (NATS_URL)
  enforcement approve NAMESPACE/RULE [STEP]
                                       approve the step the rule's rollout waits at, or STEP
                                       ahead of the rollout reaching it; only the generation
                                       rolling out now is approved
  enforcement claim-writer CLUSTER     create (or update) the claim writer consumer of managed
                                       cluster CLUSTER, which its policy-watcher binds to
                                       (deploy/nats: adding a managed cluster)
  enforcement compose-init pki|seed    prepare the docker compose demo (deploy/compose)`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("no command\n%s", usage)
	}
	controllerRuntimeOut.set(stderr)
	switch args[0] {
	case "local":
		return runLocal(ctx, getenv, stdout, stderr)
	case "dead-letters":
		return runDeadLetters(ctx, args[1:], getenv, stdout)
	case "watch":
		return runWatch(ctx, getenv, stdout)
	case "preview":
		return runPreview(ctx, args[1:], getenv, os.Stdin, stdout)
	case "explain":
		return runExplain(ctx, args[1:], getenv, stdout)
	case "events":
		return runEvents(ctx, args[1:], getenv, stdout)
	case "release-removals":
		return runReleaseRemovals(ctx, args[1:], getenv, stdout)
	case "rollouts":
		return runRollouts(ctx, args[1:], getenv, stdout)
	case "approve":
		return runApprove(ctx, args[1:], getenv, stdout)
	case "claim-writer":
		return runClaimWriter(ctx, args[1:], getenv, stdout)
	case "compose-init":
		return runComposeInit(ctx, args[1:], getenv, stdout)
	case "help", "-h", "--help":
		fmt.Fprintln(stdout, usage)
		return nil
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}
