package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// claimWriter applies "compliance changed" events of its cluster to the ClusterClaim and
// publishes "claim updated" after each write. It runs on the durable consumer
// events.ClaimWriterConsumer(cluster), whose per-key ordering hands it one cluster's events one
// at a time, in the order they were published.
//
// Idempotency: a value the claim already holds is not written again, so a duplicate or a
// redelivered event changes nothing. The id of the event that wrote the value is kept in an
// annotation; when the event comes again and finds its own id (the process stopped between the
// write and the acknowledgement), the writer publishes "claim updated" once more, and the
// server's duplicate window drops it if the first one got through.
type claimWriter struct {
	claimName string
	claims    *claimStore
	publisher *events.Publisher
	metrics   *metrics
	logger    *slog.Logger
}

// routes is the handler table of the claim writer's consumer: compliance changed, written by
// write.
func (cw *claimWriter) routes() *events.Router {
	return events.NewRouter(events.ConsumerClaimWriter, events.On(cw.write))
}

// write applies one compliance changed event to the ClusterClaim. An event for another claim is
// dead-lettered (its reason says why); API errors are retried by the consumer.
func (cw *claimWriter) write(ctx context.Context, cc *events.ComplianceChanged, _ events.Meta) error {
	if cc.Claim != cw.claimName {
		return events.Permanent(fmt.Errorf("compliance changed %s is for ClusterClaim %q; this writer writes %q",
			cc.ID(), cc.Claim, cw.claimName))
	}
	id := cc.ID()
	claim, err := cw.claims.get(ctx)
	if err != nil {
		cw.metrics.apiErrors.WithLabelValues("get_claim").Inc()
		return err
	}
	if claim.Exists && claim.Value == cc.Value {
		if claim.AppliedEvent == id {
			return cw.publishUpdated(ctx, cc, cc.Previous)
		}
		cw.logger.Debug("ClusterClaim already holds the value", "id", id, "value", cc.Value)
		return nil
	}
	written, err := cw.claims.apply(ctx, claimChange{
		Value:       cc.Value,
		Annotations: map[string]*string{annotationEvent: ptr(id)},
	})
	if err != nil {
		cw.metrics.apiErrors.WithLabelValues(errorOperation(err)).Inc()
		return err
	}
	cw.metrics.claimWrites.WithLabelValues(cc.Value).Inc()
	cw.metrics.setClaim(written)
	msg := "Updated ClusterClaim"
	if !claim.Exists {
		msg = "Created ClusterClaim"
	}
	cw.logger.Info(msg, "value", cc.Value, "previous", claim.Value, "event", id)
	return cw.publishUpdated(ctx, cc, claim.Value)
}

func (cw *claimWriter) publishUpdated(ctx context.Context, cc *events.ComplianceChanged, previous string) error {
	ev := &events.ClaimUpdated{
		Cluster:      cc.Cluster,
		Claim:        cc.Claim,
		Value:        cc.Value,
		Previous:     previous,
		ComplianceID: cc.ID(),
	}
	if _, err := cw.publisher.Publish(ctx, ev); err != nil {
		// Retried by the consumer: the claim already holds the value with this event's id, so
		// the retry publishes again without writing.
		return err
	}
	cw.metrics.published.WithLabelValues(ev.Type()).Inc()
	return nil
}
