package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Publisher publishes events to the stream with their deterministic ids as Nats-Msg-Id, so a
// republish inside the duplicate window is stored once.
type Publisher struct {
	js     jetstream.JetStream
	source string
	now    func() time.Time
	// asyncOpts are passed to every async publish (tests shorten the stall wait with them, so
	// that a full pending window is certain to be reported as a stall).
	asyncOpts []jetstream.PublishOpt
}

// NewPublisher returns a publisher that stamps events with ce-source = source (for example
// "/enforcement/source-scanner").
func NewPublisher(js jetstream.JetStream, source string) *Publisher {
	return &Publisher{js: js, source: source, now: time.Now}
}

// PublishResult says where an event was stored and whether the server dropped it as a duplicate.
type PublishResult struct {
	Sequence  uint64
	Duplicate bool
}

// Publish publishes one event and waits for the stream's acknowledgement. An invalid event fails
// with ErrInvalidEvent before anything is sent.
func (p *Publisher) Publish(ctx context.Context, e Event) (PublishResult, error) {
	m, err := Encode(e, p.source, p.now())
	if err != nil {
		return PublishResult{}, err
	}
	ack, err := p.js.PublishMsg(ctx, m)
	if err != nil {
		return PublishResult{}, fmt.Errorf("publish %s %s: %w", e.Type(), e.ID(), err)
	}
	return PublishResult{Sequence: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// PublishAll publishes events asynchronously, in order, and waits until the stream acknowledged
// every one of them or ctx ends. Events are validated first: if any is invalid nothing is sent.
// On failure it returns the errors of every event that was not acknowledged; a caller that
// retries the whole batch is safe, because stored events are deduplicated.
func (p *Publisher) PublishAll(ctx context.Context, evs []Event) error {
	now := p.now()
	msgs := make([]encoded, 0, len(evs))
	for _, e := range evs {
		m, err := Encode(e, p.source, now)
		if err != nil {
			return err
		}
		msgs = append(msgs, encoded{event: e, msg: m})
	}
	futures := make([]jetstream.PubAckFuture, 0, min(len(msgs), 1024))
	var errs []error
	// await waits for the acknowledgements of every future so far and forgets them.
	await := func() error {
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				errs = append(errs, fmt.Errorf("publish %s: %w", f.Msg().Header.Get(HeaderID), err))
			case <-ctx.Done():
				return fmt.Errorf("publish: waiting for acknowledgements: %w", ctx.Err())
			}
		}
		futures = futures[:0]
		return nil
	}
	for _, m := range msgs {
		f, err := p.js.PublishMsgAsync(m.msg, p.asyncOpts...)
		if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			// More events than the connection lets wait for an ack (a large batch on a busy
			// server): let the outstanding ones land, then go on, instead of failing the batch.
			if err := await(); err != nil {
				return errors.Join(append(errs, err)...)
			}
			f, err = p.js.PublishMsgAsync(m.msg, p.asyncOpts...)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("publish %s: %w", m.event.ID(), err))
			continue
		}
		futures = append(futures, f)
	}
	if err := await(); err != nil {
		return errors.Join(append(errs, err)...)
	}
	return errors.Join(errs...)
}

type encoded struct {
	event Event
	msg   *nats.Msg
}
