package main

// The handler turns events from the argo-syncer consumer into Syncer calls and outcome events.
//
// Trigger choreography (shared with trigger-dispatcher): an install intent with a beforeInstall
// trigger whose Application does not exist yet is acknowledged without writing anything.
// trigger-dispatcher calls the webhook and publishes TriggerDelivered, or TriggerFailed with the
// trigger's failure policy. On TriggerDelivered, or TriggerFailed with policy Ignore, the handler
// reads the intent back from the stream by its sequence and installs it; with policy Fail it does
// nothing (rule-engine reports the install as blocked). Updates of existing Applications never
// wait. InstallSucceeded{Created: true} is the afterInstall moment for trigger-dispatcher.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// Handler handles the events of the argo-syncer consumer.
type Handler struct {
	syncer  *Syncer
	pub     *events.Publisher
	js      jetstream.JetStream
	stream  string
	logger  *slog.Logger
	metrics *Metrics

	routesOnce sync.Once
	routes     *events.Router
}

// Handle is the events.Handler: it hands each event to its handler in Routes.
func (h *Handler) Handle(ctx context.Context, e events.Event, m events.Meta) error {
	return h.Routes().Handle(ctx, e, m)
}

// Routes is the handler table of the argo-syncer consumer: intents, and beforeInstall trigger
// outcomes (an afterInstall outcome changes nothing here).
func (h *Handler) Routes() *events.Router {
	h.routesOnce.Do(func() {
		h.routes = events.NewRouter(events.ConsumerArgoSyncer,
			events.On(func(ctx context.Context, ev *events.InstallIntent, _ events.Meta) error {
				return h.install(ctx, ev, true)
			}),
			events.On(func(ctx context.Context, ev *events.UninstallIntent, _ events.Meta) error {
				return h.uninstall(ctx, ev)
			}),
			events.On(func(ctx context.Context, ev *events.TriggerDelivered, _ events.Meta) error {
				if ev.Phase != events.PhaseBeforeInstall {
					return nil
				}
				return h.release(ctx, ev.IntentID, ev.IntentSequence)
			}),
			events.On(func(ctx context.Context, ev *events.TriggerFailed, _ events.Meta) error {
				if ev.Phase != events.PhaseBeforeInstall || ev.FailurePolicy == "Fail" {
					return nil
				}
				return h.release(ctx, ev.IntentID, ev.IntentSequence)
			}),
		)
	})
	return h.routes
}

// install runs one install intent and publishes its outcome. A permanent failure is published and
// acknowledged (the event is the record); any other failure is published and retried.
func (h *Handler) install(ctx context.Context, in *events.InstallIntent, gate bool) error {
	res, err := h.syncer.Install(ctx, in, gate)
	if err == nil {
		if res.Waiting {
			h.metrics.intent("install", "waiting")
			h.logger.Info("Waiting for beforeInstall trigger", "application", res.Application, "intent", in.ID())
			return nil
		}
		h.metrics.intent("install", "installed")
		_, err := h.pub.Publish(ctx, &events.InstallSucceeded{
			IntentID: in.ID(), Rule: in.Rule, Cluster: in.Cluster.Name, Enforcement: in.Enforcement.Name,
			Application: res.Application, Created: res.Created, SpecHash: in.SpecHash,
		})
		return err
	}
	h.metrics.intent("install", "failed")
	f := &failure{reason: ReasonAPIError, err: err}
	errors.As(err, &f)
	if _, pubErr := h.pub.Publish(ctx, &events.InstallFailed{
		IntentID: in.ID(), Rule: in.Rule, Cluster: in.Cluster.Name, Enforcement: in.Enforcement.Name,
		Application: res.Application, Reason: f.reason, Message: f.err.Error(), Permanent: f.permanent,
	}); pubErr != nil {
		return errors.Join(err, pubErr)
	}
	if f.permanent {
		h.logger.Error("Install rejected", "application", res.Application, "reason", f.reason, "error", f.err)
		return nil
	}
	return err
}

func (h *Handler) uninstall(ctx context.Context, in *events.UninstallIntent) error {
	res, err := h.syncer.Uninstall(ctx, in)
	if err != nil {
		var f *failure
		if errors.As(err, &f) && f.permanent {
			return events.Permanent(err)
		}
		return err
	}
	h.metrics.intent("uninstall", "uninstalled")
	_, err = h.pub.Publish(ctx, &events.UninstallDone{
		IntentID: in.ID(), Rule: in.Rule, Cluster: in.Cluster.Name, Enforcement: in.Enforcement,
		Application: res.Application, Deleted: res.Deleted,
	})
	return err
}

// release installs the intent a beforeInstall trigger waited for, read back from the stream by
// its sequence. It skips the install when an uninstall of the same Application was published
// after the intent.
func (h *Handler) release(ctx context.Context, intentID string, seq uint64) error {
	if seq == 0 {
		return events.Permanent(fmt.Errorf("trigger outcome for intent %s carries no intent sequence", intentID))
	}
	stream, err := h.js.Stream(ctx, h.stream)
	if err != nil {
		return fmt.Errorf("open stream %s: %w", h.stream, err)
	}
	raw, err := stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return events.Permanent(fmt.Errorf("intent %s at sequence %d is no longer in the stream", intentID, seq))
	}
	if err != nil {
		return fmt.Errorf("read intent %s at sequence %d: %w", intentID, seq, err)
	}
	in, _, err := events.DecodeAs[*events.InstallIntent](raw.Subject, raw.Header, raw.Data)
	if err != nil {
		return events.Permanent(fmt.Errorf("intent at sequence %d: %w", seq, err))
	}
	if in.ID() != intentID {
		return events.Permanent(fmt.Errorf("sequence %d holds intent %s, not %s", seq, in.ID(), intentID))
	}
	superseded, err := h.uninstalledSince(ctx, stream, in, seq)
	if err != nil {
		return err
	}
	if superseded {
		h.logger.Info("Skipping released install: an uninstall followed it", "intent", intentID)
		return nil
	}
	return h.install(ctx, in, false)
}

// uninstalledSince reports whether the last uninstall intent of the intent's rule and cluster
// came after it and names the same enforcement. Not built yet: an uninstall of the same
// Application followed by an uninstall of another enforcement of that rule and cluster hides
// the first one from this check.
func (h *Handler) uninstalledSince(ctx context.Context, stream jetstream.Stream, in *events.InstallIntent, seq uint64) (bool, error) {
	subject := events.Subject(&events.UninstallIntent{Rule: in.Rule, Cluster: events.Target{Name: in.Cluster.Name}})
	raw, err := stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read last uninstall on %s: %w", subject, err)
	}
	if raw.Sequence < seq {
		return false, nil
	}
	un, _, err := events.DecodeAs[*events.UninstallIntent](raw.Subject, raw.Header, raw.Data)
	if err != nil {
		return false, nil // not ours to judge; the install goes ahead
	}
	return un.Enforcement == in.Enforcement.Name, nil
}
