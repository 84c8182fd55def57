package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// Two ways of making the claim take a decision, chosen by NATS_URL.
//
// Without NATS the watcher writes the claim itself (the original's behaviour): the value and the
// clock annotation in one merge patch.
//
// With NATS the watcher only publishes "compliance changed"; the claim writer (writer.go),
// consuming its cluster's durable consumer, writes the value. The watcher still writes the clock
// annotation itself, since the clock is its own state. It publishes when the claim does not hold
// the decided value, unless that value is already on its way: it was the last one published and
// since then the claim was either not written at all (same resourceVersion; a writer that is
// down gets one event, not one per poll) or written only by the claim writer applying an earlier
// event of the same backlog (the applied-event annotation names one of them and the value is
// that event's). Any other write (a person, another tool) gets a new event, so a hand edit is
// put back in this mode too.

// directSink writes the claim from the watcher.
type directSink struct {
	claims  *claimStore
	metrics *metrics
	logger  *slog.Logger
}

func (s *directSink) apply(ctx context.Context, d decision, _ observation, claim claimState) (claimState, error) {
	ch := claimChange{Annotations: sinceAnnotation(d)}
	if d.needsValue(claim) {
		ch.Value = d.Value
	}
	if ch.Value == "" && len(ch.Annotations) == 0 {
		return claim, nil
	}
	written, err := s.claims.apply(ctx, ch)
	if err != nil {
		s.metrics.apiErrors.WithLabelValues(errorOperation(err)).Inc()
		return claim, err
	}
	if ch.Value == "" {
		s.metrics.clockWrites.Inc()
		return written, nil
	}
	s.metrics.claimWrites.WithLabelValues(ch.Value).Inc()
	logClaimWrite(s.logger, claim, ch.Value, d)
	return written, nil
}

// maxPending bounds the backlog the event sink remembers; a writer further behind than this
// only costs a redundant event.
const maxPending = 16

// eventSink publishes decisions for the claim writer.
type eventSink struct {
	cfg       config
	claims    *claimStore
	publisher *events.Publisher
	metrics   *metrics
	logger    *slog.Logger
	now       func() time.Time

	// pending lists the events published since the claim last held the decided value, oldest
	// first; rv is the claim's resourceVersion when the last of them was published.
	pending []pendingEvent
	rv      string
}

type pendingEvent struct {
	id    string
	value string
}

// inFlight reports whether value is already on its way to the claim writer (see above).
func (s *eventSink) inFlight(value string, claim claimState) bool {
	if len(s.pending) == 0 || s.pending[len(s.pending)-1].value != value {
		return false
	}
	if claim.ResourceVersion == s.rv {
		return true
	}
	for _, p := range s.pending[:len(s.pending)-1] {
		if p.id == claim.AppliedEvent && p.value == claim.Value {
			return true
		}
	}
	return false
}

func (s *eventSink) apply(ctx context.Context, d decision, obs observation, claim claimState) (claimState, error) {
	if ann := sinceAnnotation(d); len(ann) > 0 && claim.Exists {
		written, err := s.claims.apply(ctx, claimChange{Annotations: ann})
		if err != nil {
			s.metrics.apiErrors.WithLabelValues(errorOperation(err)).Inc()
			return claim, err
		}
		s.metrics.clockWrites.Inc()
		if written.Exists {
			// Our own write does not mean the writer acted on the pending events.
			if s.rv == claim.ResourceVersion {
				s.rv = written.ResourceVersion
			}
			claim = written
		}
	}
	if !d.needsValue(claim) {
		s.pending = nil
		return claim, nil
	}
	if s.inFlight(d.Value, claim) {
		return claim, nil
	}
	ev := &events.ComplianceChanged{
		Cluster:              s.cfg.ClusterName,
		Namespace:            s.cfg.Namespace,
		Claim:                s.cfg.ClaimName,
		Value:                d.Value,
		Previous:             claim.Value,
		Since:                s.now().UTC(),
		Policies:             obs.Policies,
		NonCompliantPolicies: obs.NonCompliant,
	}
	res, err := s.publisher.Publish(ctx, ev)
	if err != nil {
		return claim, err
	}
	s.metrics.published.WithLabelValues(ev.Type()).Inc()
	s.pending = append(s.pending, pendingEvent{id: ev.ID(), value: d.Value})
	if len(s.pending) > maxPending {
		s.pending = s.pending[len(s.pending)-maxPending:]
	}
	s.rv = claim.ResourceVersion
	s.logger.Info("Published compliance changed", "id", ev.ID(), "value", ev.Value, "previous", ev.Previous,
		"sequence", res.Sequence, "duplicate", res.Duplicate)
	return claim, nil
}

// sinceAnnotation turns the decision's clock change into claim annotations (nil: none).
func sinceAnnotation(d decision) map[string]*string {
	switch d.SinceChange {
	case sinceSet:
		return map[string]*string{annotationCompliantSince: ptr(formatSince(d.Since))}
	case sinceRemove:
		return map[string]*string{annotationCompliantSince: nil}
	}
	return nil
}

// logClaimWrite logs a value write in Kubernetes style.
func logClaimWrite(logger *slog.Logger, before claimState, value string, d decision) {
	msg := "Updated ClusterClaim"
	if !before.Exists {
		msg = "Created ClusterClaim"
	}
	attrs := []any{"value", value, "previous", before.Value}
	if d.Pending {
		attrs = append(attrs, "compliantAt", d.Due.UTC().Format(time.RFC3339Nano))
	}
	logger.Info(msg, attrs...)
}

// isNotCreatable reports the missing-claim-without-create-permission condition.
func isNotCreatable(err error) bool { return errors.Is(err, errClaimNotCreatable) }
