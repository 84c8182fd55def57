package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// maxTriggerTimeout is the largest timeout a trigger can have, as the CRD allows (1..300 s), and
// the largest TRIGGER_MAX_TIMEOUT.
const maxTriggerTimeout = 300 * time.Second

// signingSecretKey is the key of the signing Secret that holds the HMAC key.
const signingSecretKey = "key"

// dispatcherDeps are the dispatcher's connections to the outside, injected so that tests and
// benchmarks build it the same way run does.
type dispatcherDeps struct {
	records   *recordStore
	publisher *events.Publisher
	secrets   corev1client.SecretsGetter
	// rules reads ClusterRules, for the endpoints whose credentials intents do not carry.
	rules   ruleGetter
	metrics *metrics
	logger  *slog.Logger
}

// dispatcher turns install intents, gated installs and install outcomes into webhook
// deliveries. It never decides whether an install waits: argo-syncer does, and says so with
// InstallGated.
type dispatcher struct {
	cfg config
	dispatcherDeps
	webhooks *webhookClient

	stopOnce sync.Once
	stopCh   chan struct{}
	routes   *events.Router
}

func newDispatcher(cfg config, deps dispatcherDeps) *dispatcher {
	if deps.logger == nil {
		deps.logger = discardLogger()
	}
	stop := make(chan struct{})
	d := &dispatcher{
		cfg:            cfg,
		dispatcherDeps: deps,
		stopCh:         stop,
		webhooks: &webhookClient{
			http:        newHTTPClient(cfg.Egress),
			maxAttempts: cfg.MaxAttempts,
			backoffBase: cfg.BackoffBase,
			backoffMax:  cfg.BackoffMax,
			metrics:     deps.metrics,
			logger:      deps.logger,
			now:         time.Now,
			stop:        stop,
		},
	}
	d.routes = dispatcherRoutes(d)
	return d
}

// dispatcherRoutes is the handler table of the trigger-dispatcher consumer.
func dispatcherRoutes(d *dispatcher) *events.Router {
	return events.NewRouter(events.ConsumerTriggerDispatcher, events.On(d.onIntent), events.On(d.onGated), events.On(d.onSucceeded))
}

// shutdown makes deliveries that wait for a retry give up; their events are handed back.
func (d *dispatcher) shutdown() { d.stopOnce.Do(func() { close(d.stopCh) }) }

// handlerTimeout bounds one handler call: every attempt at the longest timeout plus every
// backoff, with a minute to spare for Kubernetes and NATS calls.
func (d *dispatcher) handlerTimeout() time.Duration {
	return time.Duration(d.cfg.MaxAttempts)*(d.cfg.MaxTimeout+d.cfg.BackoffMax) + time.Minute
}

// handle is the consumer's handler. It returns nil once the event's deliveries are final and
// their outcome events are stored; any error makes the consumer retry the event, which is safe
// because a final record is never delivered again.
func (d *dispatcher) handle(ctx context.Context, e events.Event, m events.Meta) error {
	select {
	case <-d.stopCh: // shutting down: leave the event to the next instance
		return errShuttingDown
	default:
	}
	return d.routes.Handle(ctx, e, m)
}

// onIntent notes the intent as the newest of its rule and Application and arms its afterInstall
// delivery. beforeInstall waits for InstallGated: only argo-syncer knows whether the intent
// creates the Application.
func (d *dispatcher) onIntent(ctx context.Context, in *events.InstallIntent, m events.Meta) error {
	intentID := m.ID
	if intentID == "" {
		intentID = in.ID()
	}
	appName := events.ApplicationName(in.Cluster.Name, in.Enforcement.Name)
	pair := pairOf(in.Rule, appName)
	// Every intent, with triggers or not, becomes the newest of its rule and Application, so
	// that an older blocked beforeInstall is never released over it.
	if err := d.records.noteLatest(ctx, pair, latestIntent{IntentID: intentID, Sequence: m.Sequence}); err != nil {
		return err
	}
	if in.Triggers == nil || in.Triggers.AfterInstall == nil {
		return nil
	}
	// Armed as soon as the intent is seen, so that an InstallSucceeded that carries no intent (from
	// an argo-syncer before intentSequence and intent were added) finds the delivery waiting.
	r, err := newRecord(in, intentID, m.Sequence, events.PhaseAfterInstall, *in.Triggers.AfterInstall)
	if err != nil {
		return events.Permanent(err)
	}
	r.State, r.Pair = stateArmed, pair.key()
	_, err = d.records.create(ctx, r)
	return err
}

// onGated delivers the beforeInstall of an intent argo-syncer holds back until the webhook has
// answered. A redelivered event whose delivery is final only makes sure the outcome is published.
func (d *dispatcher) onGated(ctx context.Context, g *events.InstallGated, m events.Meta) error {
	in := &g.Intent
	id := deliveryID(g.IntentID, events.PhaseBeforeInstall)
	existing, _, err := d.records.get(ctx, id)
	if err != nil {
		return err
	}
	if existing != nil && existing.final() {
		return d.publish(ctx, existing)
	}
	r, err := newRecord(in, g.IntentID, g.IntentSequence, events.PhaseBeforeInstall, *in.Triggers.BeforeInstall)
	if err != nil {
		return events.Permanent(err)
	}
	// The pair's name, as onIntent derives it, rather than g.Application: the marker is the
	// pair's whatever name its Application has.
	r.Pair = pairKey(in.Rule, events.ApplicationName(in.Cluster.Name, in.Enforcement.Name))
	return d.deliverAndRecord(ctx, r, eventSeries(m))
}

// onSucceeded delivers the afterInstall of the intent when argo-syncer created the Application
// (not when it updated one). The record is the one the intent armed or, when the intent has not
// been seen yet, one made from the intent this event carries: the stream orders the intent
// first, but a redelivery does not (an intent handed back by a replica that lost its leadership
// comes again after its AckWait, while the next replica already handles what followed it).
func (d *dispatcher) onSucceeded(ctx context.Context, s *events.InstallSucceeded, m events.Meta) error {
	if !s.Created {
		return nil
	}
	r, err := d.afterInstallRecord(ctx, s)
	if err != nil || r == nil { // no record: the intent had no afterInstall trigger
		return err
	}
	if r.final() {
		return d.publish(ctx, r)
	}
	return d.deliverAndRecord(ctx, r, eventSeries(m))
}

// afterInstallRecord returns the afterInstall record of the intent s reports, arming it from the
// intent s carries when onIntent has not armed it yet; nil when the intent has no afterInstall
// trigger. An argo-syncer that reports the intent's sequence carries the intent of every creation
// with an afterInstall trigger (events.InstallSucceeded), so an event with the sequence and
// without the intent needs no look at the records: there is nothing to deliver. Only an event of
// an earlier argo-syncer, without either, is looked up.
func (d *dispatcher) afterInstallRecord(ctx context.Context, s *events.InstallSucceeded) (*record, error) {
	if s.IntentSequence != 0 && s.Intent == nil {
		return nil, nil
	}
	id := deliveryID(s.IntentID, events.PhaseAfterInstall)
	r, _, err := d.records.get(ctx, id)
	if err != nil || r != nil {
		return r, err
	}
	in := s.Intent
	if in == nil || in.Triggers == nil || in.Triggers.AfterInstall == nil {
		return nil, nil
	}
	r, err = newRecord(in, s.IntentID, s.IntentSequence, events.PhaseAfterInstall, *in.Triggers.AfterInstall)
	if err != nil {
		return nil, events.Permanent(err)
	}
	r.State = stateArmed
	r.Pair = pairKey(in.Rule, events.ApplicationName(in.Cluster.Name, in.Enforcement.Name))
	if _, err := d.records.create(ctx, r); err != nil {
		return nil, err
	}
	// Read back: if onIntent armed it in the meantime, that record is the one.
	r, _, err = d.records.get(ctx, id)
	return r, err
}

// eventSeries names the attempts made while handling the event m: its stream sequence and
// delivery count, so a delivery repeated on a redelivery (after a restart) is a new series and
// its attempts are recorded again instead of being deduplicated as the earlier ones.
func eventSeries(m events.Meta) string {
	return fmt.Sprintf("event-%d-%d", m.Sequence, m.NumDelivered)
}

// deliverAndRecord calls the webhook, stores the final outcome in the record and publishes it.
// The record is written before the event: if the process dies in between, the redelivered event
// finds the final record and publishes the outcome without calling the webhook again.
func (d *dispatcher) deliverAndRecord(ctx context.Context, r *record, series string) error {
	res, err := d.deliver(ctx, r, series)
	if err != nil {
		return err
	}
	r.Attempts, r.StatusCode, r.Message = res.Attempts, res.StatusCode, res.Message
	r.State = stateFailed
	if res.Delivered {
		r.State = stateDelivered
	}
	r.UpdatedAt = time.Now().UTC()
	if err := d.records.put(ctx, r); err != nil {
		return err
	}
	outcome := outcomeFailed
	if res.Delivered {
		outcome = outcomeDelivered
	}
	d.metrics.delivery(r.Phase, outcome)
	return d.publish(ctx, r)
}

// deliver makes the delivery of r, fetching the signing key when the trigger names one, and
// publishes a TriggerAttempted event of series for every attempt. A missing Secret or key fails
// the delivery without an attempt (an unsigned call would defeat the receiver's check); an
// unreachable API server, or an attempt event that cannot be stored, is an error, retried by the
// consumer.
func (d *dispatcher) deliver(ctx context.Context, r *record, series string) (webhookResult, error) {
	endpoint, err := d.fullEndpoint(ctx, r)
	var unresolved *endpointError
	if errors.As(err, &unresolved) {
		d.logger.Warn("Webhook endpoint unresolved; delivery failed", "deliveryId", r.DeliveryID,
			"rule", r.Rule.String(), "error", err)
		return webhookResult{Message: err.Error()}, nil
	}
	if err != nil {
		return webhookResult{}, err
	}
	req := webhookRequest{
		ID: r.DeliveryID, Phase: r.Phase, Endpoint: endpoint,
		Timeout: triggerTimeout(r.Trigger, d.cfg.DefaultTimeout, d.cfg.MaxTimeout), Body: r.Body,
		FirstAttempt: r.Attempts + 1,
		Report: func(ctx context.Context, a attemptReport) error {
			_, err := d.publisher.Publish(ctx, r.attempted(series, a))
			return err
		},
	}
	if name := r.Trigger.SigningSecret; name != "" {
		key, err := d.signingKey(ctx, r.Rule.Namespace, name)
		var bad *badSecretError
		if errors.As(err, &bad) {
			d.logger.Warn("Signing Secret unusable; delivery failed", "deliveryId", r.DeliveryID,
				"rule", r.Rule.String(), "error", err)
			return webhookResult{Message: err.Error()}, nil
		}
		if err != nil {
			return webhookResult{}, err
		}
		req.Key = key
	}
	return d.webhooks.deliver(ctx, req)
}

// badSecretError says the signing Secret is missing or has no usable key.
type badSecretError struct{ msg string }

func (e *badSecretError) Error() string { return e.msg }

// signingKey reads the HMAC key from the Secret name in namespace. The key never leaves this
// function except into the signature.
func (d *dispatcher) signingKey(ctx context.Context, namespace, name string) ([]byte, error) {
	s, err := d.secrets.Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, &badSecretError{fmt.Sprintf("signing Secret %s/%s not found", namespace, name)}
	}
	if err != nil {
		return nil, fmt.Errorf("read signing Secret %s/%s: %w", namespace, name, err)
	}
	v, ok := s.Data[signingSecretKey]
	if !ok {
		return nil, &badSecretError{fmt.Sprintf("signing Secret %s/%s has no key %q", namespace, name, signingSecretKey)}
	}
	key, err := signingKey(v)
	if err != nil {
		return nil, &badSecretError{fmt.Sprintf("signing Secret %s/%s key %q: %v", namespace, name, signingSecretKey, err)}
	}
	return key, nil
}

// publish stores the record's outcome event. Its id is derived from the delivery id, so
// publishing it again (after a redelivery) is deduplicated by the server.
func (d *dispatcher) publish(ctx context.Context, r *record) error {
	ev := r.outcome()
	if _, err := d.publisher.Publish(ctx, ev); err != nil {
		return err
	}
	d.logger.Info("Published trigger outcome", "type", ev.Type(), "deliveryId", r.DeliveryID,
		"phase", r.Phase, "rule", r.Rule.String(), "cluster", r.Cluster, "enforcement", r.Enforcement,
		"attempts", r.Attempts, "statusCode", r.StatusCode)
	return nil
}

// newRecord builds the delivery record of one phase of an intent, body included.
func newRecord(in *events.InstallIntent, intentID string, seq uint64, phase string, t events.Trigger) (*record, error) {
	id := deliveryID(intentID, phase)
	body, err := buildPayload(in, phase, id)
	if err != nil {
		return nil, fmt.Errorf("render %s body: %w", phase, err)
	}
	return &record{
		DeliveryID: id, IntentID: intentID, IntentSequence: seq, Phase: phase,
		Rule: in.Rule, Cluster: in.Cluster.Name, Enforcement: in.Enforcement.Name,
		Trigger: t, Body: body, UpdatedAt: time.Now().UTC(),
	}, nil
}

// superseded reports whether a newer intent than r's was seen for r's rule and Application. It
// only spares the webhook calls: argo-syncer, which owns the gate, would not install an intent
// that no longer waits anyway.
func (d *dispatcher) superseded(ctx context.Context, r *record) (bool, error) {
	if r.Pair == "" {
		return false, nil
	}
	li, _, err := d.records.latest(ctx, r.Pair)
	if err != nil || li == nil {
		return false, err
	}
	return li.Sequence > r.IntentSequence, nil
}

// triggerTimeout is the timeout of one attempt: the trigger's timeout, def when unset, capped at
// limit (TRIGGER_MAX_TIMEOUT), which bounds how long one attempt holds a consumer slot.
func triggerTimeout(t events.Trigger, def, limit time.Duration) time.Duration {
	if t.TimeoutSeconds <= 0 {
		return min(def, limit)
	}
	return min(time.Duration(t.TimeoutSeconds)*time.Second, limit)
}

// retryBlocked tries again, every BlockedRetryInterval, the beforeInstall deliveries that failed
// under failurePolicy Fail: their installs wait for a 2xx. A success records the delivery and
// publishes TriggerDelivered, which releases the install still waiting in argo-syncer and clears
// the blocked condition in rule-engine. Several replicas may run the loop: a compare-and-set on the record
// lets one of them take each retry. It returns when ctx ends or the dispatcher shuts down.
func (d *dispatcher) retryBlocked(ctx context.Context) {
	if d.cfg.BlockedRetryInterval <= 0 {
		return
	}
	t := time.NewTicker(d.cfg.BlockedRetryInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.stopCh:
			return
		case <-t.C:
		}
		if err := d.retryBlockedOnce(ctx); err != nil && ctx.Err() == nil {
			d.logger.Warn("Retrying blocked deliveries", "error", err)
		}
	}
}

// retryBlockedOnce makes one pass over the records.
func (d *dispatcher) retryBlockedOnce(ctx context.Context) error {
	ids, err := d.records.ids(ctx)
	if err != nil {
		return err
	}
	blocked := 0
	var errs []error
	for _, id := range ids {
		if !strings.HasPrefix(id, "dlv_") { // latest-intent markers
			continue
		}
		stillBlocked, err := d.retryBlockedRecord(ctx, id)
		if stillBlocked {
			blocked++
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if d.metrics != nil {
		d.metrics.blocked.Set(float64(blocked))
	}
	return errors.Join(errs...)
}

// retryBlockedRecord retries the delivery record id if it is blocked and due, and reports whether
// it is still blocked afterwards.
func (d *dispatcher) retryBlockedRecord(ctx context.Context, id string) (stillBlocked bool, err error) {
	r, rev, err := d.records.get(ctx, id)
	if err != nil || r == nil || !r.blocked() {
		return false, err
	}
	// Claim the retry: only the replica whose compare-and-set succeeds delivers, and a record
	// touched less than half an interval ago (by another replica's pass) waits.
	if time.Since(r.UpdatedAt) < d.cfg.BlockedRetryInterval/2 {
		return true, nil
	}
	superseded, err := d.superseded(ctx, r)
	if err != nil {
		return false, err
	}
	r.UpdatedAt = time.Now().UTC()
	if superseded {
		r.State, r.Message = stateSuperseded, "superseded by a newer install intent; not released"
		_, _, err := d.records.update(ctx, r, rev)
		d.logger.Info("Blocked beforeInstall superseded by a newer intent", "deliveryId", r.DeliveryID,
			"rule", r.Rule.String(), "cluster", r.Cluster, "enforcement", r.Enforcement)
		return false, err
	}
	// The claim's revision is unique to this retry, so it names the series of its attempts.
	ok, claimed, err := d.records.update(ctx, r, rev)
	if err != nil || !ok {
		return false, err
	}
	res, err := d.deliver(ctx, r, fmt.Sprintf("retry-%d", claimed))
	if err != nil {
		return true, err
	}
	r.Attempts += res.Attempts
	r.StatusCode, r.Message, r.UpdatedAt = res.StatusCode, res.Message, time.Now().UTC()
	if !res.Delivered {
		return true, d.records.put(ctx, r)
	}
	// Published before it is recorded: the intent was acknowledged long ago, so if the
	// record said Delivered before the event was stored, a crash in between would lose the
	// release. The other way round, a crash repeats the call with the same id.
	r.State = stateDelivered
	if err := d.publish(ctx, r); err != nil {
		return false, err
	}
	if err := d.records.put(ctx, r); err != nil {
		return false, err
	}
	d.metrics.delivery(r.Phase, outcomeDelivered)
	d.logger.Info("Blocked beforeInstall delivered; install released", "deliveryId", r.DeliveryID,
		"rule", r.Rule.String(), "cluster", r.Cluster, "enforcement", r.Enforcement)
	return false, nil
}
