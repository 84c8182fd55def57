package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// runDeadLetters lists dead letters or replays one (see pkg/events ListDeadLetters and
// ReplayDeadLetter). A replayed event keeps its id, so consumers stay idempotent.
func runDeadLetters(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	nc, js, err := connectJetStream(getenv)
	if err != nil {
		return err
	}
	defer nc.Close()
	if len(args) == 2 && args[0] == "replay" {
		seq, err := strconv.ParseUint(args[1], 10, 64)
		if err != nil {
			return fmt.Errorf("replay: %q is not a stream sequence", args[1])
		}
		res, err := events.ReplayDeadLetter(ctx, js, seq)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Replayed dead letter %d as stream sequence %d\n", seq, res.Sequence)
		return nil
	}
	if len(args) > 1 {
		return fmt.Errorf("dead-letters: unexpected arguments %q\n%s", args, usage)
	}
	consumer := ""
	if len(args) == 1 {
		consumer = args[0]
	}
	dls, err := events.ListDeadLetters(ctx, js, consumer)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SEQ\tCONSUMER\tTYPE\tEVENT ID\tATTEMPTS\tREASON")
	for _, d := range dls {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%s\n", d.Sequence, d.Consumer, d.EventType, d.EventID, d.Attempts, d.Reason)
	}
	return w.Flush()
}
