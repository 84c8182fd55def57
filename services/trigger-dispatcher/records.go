package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
)

// Delivery states kept in a record.
const (
	// stateArmed: an afterInstall delivery that waits for its intent's InstallSucceeded{Created}.
	stateArmed = "Armed"
	// stateDelivered: the webhook answered 2xx. Final.
	stateDelivered = "Delivered"
	// stateFailed: the webhook did not answer 2xx after all retries. Final for Ignore; under Fail
	// a beforeInstall failure is retried by the blocked-delivery loop until it is delivered.
	stateFailed = "Failed"
	// stateSuperseded: a blocked beforeInstall whose install a newer intent for the same
	// Application replaced. Final: argo-syncer no longer waits for it, so it is not retried.
	stateSuperseded = "Superseded"
)

// record is one delivery (one phase of one install intent) in the enforcement-triggers bucket,
// keyed by its delivery id. It holds everything needed to deliver again and to republish the
// outcome event, so it survives restarts of every service: no in-memory state matters.
type record struct {
	DeliveryID     string         `json:"deliveryId"`
	IntentID       string         `json:"intentId"`
	IntentSequence uint64         `json:"intentSequence"`
	Phase          string         `json:"phase"`
	Rule           events.RuleRef `json:"rule"`
	Cluster        string         `json:"cluster"`
	Enforcement    string         `json:"enforcement"`
	// Pair is the key of the latest-intent marker of the record's rule and Application.
	Pair       string          `json:"pair"`
	Trigger    events.Trigger  `json:"trigger"`
	Body       json.RawMessage `json:"body"`
	State      string          `json:"state"`
	StatusCode int             `json:"statusCode,omitempty"`
	Attempts   int             `json:"attempts,omitempty"`
	Message    string          `json:"message,omitempty"`
	UpdatedAt  time.Time       `json:"updatedAt"`
}

// final reports whether the delivery is finished and must not call the webhook again on a
// redelivered event.
func (r *record) final() bool {
	return r.State == stateDelivered || r.State == stateFailed || r.State == stateSuperseded
}

// failurePolicy is the trigger's policy with its default, Ignore (as the original).
func (r *record) failurePolicy() string {
	if r.Trigger.FailurePolicy == "" {
		return "Ignore"
	}
	return r.Trigger.FailurePolicy
}

// blocked reports whether the record holds an install: a failed beforeInstall under Fail.
func (r *record) blocked() bool {
	return r.Phase == events.PhaseBeforeInstall && r.State == stateFailed && r.failurePolicy() == "Fail"
}

// outcome is the event that reports the record's final state.
func (r *record) outcome() events.Event {
	if r.State == stateDelivered {
		return &events.TriggerDelivered{
			DeliveryID: r.DeliveryID, IntentID: r.IntentID, IntentSequence: r.IntentSequence,
			Phase: r.Phase, Rule: r.Rule, Cluster: r.Cluster, Enforcement: r.Enforcement,
			StatusCode: r.StatusCode, Attempts: r.Attempts,
		}
	}
	return &events.TriggerFailed{
		DeliveryID: r.DeliveryID, IntentID: r.IntentID, IntentSequence: r.IntentSequence,
		Phase: r.Phase, Rule: r.Rule, Cluster: r.Cluster, Enforcement: r.Enforcement,
		FailurePolicy: r.failurePolicy(), StatusCode: r.StatusCode, Attempts: r.Attempts, Message: r.Message,
	}
}

// attempted is the event of one attempt of the record's delivery, in series. The attempt's
// error is the dispatcher's own classification (the endpoint is never part of it).
func (r *record) attempted(series string, a attemptReport) *events.TriggerAttempted {
	return &events.TriggerAttempted{
		DeliveryID: r.DeliveryID, IntentID: r.IntentID, IntentSequence: r.IntentSequence,
		Phase: r.Phase, Rule: r.Rule, Cluster: r.Cluster, Enforcement: r.Enforcement,
		Series: series, Attempt: a.Attempt, Result: a.Result, StatusCode: a.StatusCode, Error: errString(a.Err),
		DurationMillis: a.Duration.Milliseconds(), WillRetry: a.WillRetry, RetryInMillis: a.RetryIn.Milliseconds(),
	}
}

// recordStore reads and writes records in the KV bucket.
type recordStore struct {
	kv jetstream.KeyValue

	// marks remembers, for each pair whose latest-intent marker this process wrote or read, the
	// marker's revision and sequence, so that the next intent of the pair writes it in one
	// compare-and-set instead of a read and a write, and an intent no newer than the marker
	// writes nothing. The bucket stays the truth: a revision that moved meanwhile (another
	// replica, the bucket's TTL) fails the write, which then reads the marker again.
	mu    sync.Mutex
	marks map[pairID]notedMark
}

// notedMark is what recordStore.marks keeps of one latest-intent marker.
type notedMark struct {
	revision, sequence uint64
}

// maxNotedMarks bounds recordStore.marks (about 52 bytes an entry, measured at 100,000). A
// fleet with more pairs, or a long run of clusters that come and go, starts the map afresh when
// it is full: what is forgotten costs one more request the next time its pair gets an intent.
const maxNotedMarks = 1 << 20

// get returns the record and its revision, or nil when there is none.
func (s *recordStore) get(ctx context.Context, id string) (*record, uint64, error) {
	return service.GetJSON[record](ctx, s.kv, id, "delivery record")
}

// create stores r unless a record with its id exists; it reports whether it stored it.
func (s *recordStore) create(ctx context.Context, r *record) (bool, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return false, err
	}
	if _, err := s.kv.Create(ctx, r.DeliveryID, data); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return false, nil
		}
		return false, fmt.Errorf("create delivery record %s: %w", r.DeliveryID, err)
	}
	return true, nil
}

// put stores r, replacing what was there.
func (s *recordStore) put(ctx context.Context, r *record) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := s.kv.Put(ctx, r.DeliveryID, data); err != nil {
		return fmt.Errorf("write delivery record %s: %w", r.DeliveryID, err)
	}
	return nil
}

// update stores r only if the record is still at revision rev (compare and set). It reports
// false when another writer got there first.
func (s *recordStore) update(ctx context.Context, r *record, rev uint64) (bool, uint64, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return false, 0, err
	}
	next, err := s.kv.Update(ctx, r.DeliveryID, data, rev)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return false, 0, nil
		}
		return false, 0, fmt.Errorf("update delivery record %s: %w", r.DeliveryID, err)
	}
	return true, next, nil
}

// ids lists the ids of all records; none is not an error.
func (s *recordStore) ids(ctx context.Context) ([]string, error) {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list delivery records: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	var out []string
	for k := range lister.Keys() {
		out = append(out, k)
	}
	return out, nil
}

// latestIntent marks the newest install intent (by stream sequence) of one rule and Application.
// The blocked-delivery loop releases an install only while its intent is still the newest.
type latestIntent struct {
	IntentID string `json:"intentId"`
	Sequence uint64 `json:"sequence"`
}

// pairID names the latest-intent marker of a rule and an Application: a 128-bit digest of the
// rule and events.ApplicationName of the intent's pair. That name's 64-bit suffix keeps two pairs
// whose names were crafted to collide from sharing a marker (one's newer intent would supersede the other's
// blocked beforeInstall). Markers written under the 32-bit names of earlier versions are not
// moved: a blocked delivery recorded before the upgrade may then be retried once after a newer
// intent, a webhook call argo-syncer ignores (it releases only the intent still waiting).
type pairID [16]byte

func pairOf(rule events.RuleRef, application string) pairID {
	sum := sha256.Sum256([]byte(rule.Namespace + "/" + rule.Name + "/" + application))
	return pairID(sum[:16])
}

// key is the marker's key in the bucket.
func (p pairID) key() string { return "pair_" + hex.EncodeToString(p[:]) }

// pairKey is the key of the latest-intent marker of a rule and an Application.
func pairKey(rule events.RuleRef, application string) string {
	return pairOf(rule, application).key()
}

// latest returns the marker under key, or nil.
func (s *recordStore) latest(ctx context.Context, key string) (*latestIntent, uint64, error) {
	return service.GetJSON[latestIntent](ctx, s.kv, key, "latest intent")
}

// noteLatest records li as pair's latest intent unless a newer intent (higher sequence) is
// recorded already. A redelivered old intent therefore never moves the marker back.
//
// A marker this process knows is written in one compare-and-set at the revision it knows, and
// one it has never seen is created outright (a new pair, the common case of a new cluster):
// one request either way. Only when that write finds the bucket other than expected (an
// existing marker, a moved revision) is the marker read and compared.
func (s *recordStore) noteLatest(ctx context.Context, pair pairID, li latestIntent) error {
	// cur and rev are the marker as last known: remembered at first, read after a write that
	// found the bucket otherwise.
	var cur *latestIntent
	var rev uint64
	if known, ok := s.noted(pair); ok {
		if known.sequence >= li.Sequence {
			return nil
		}
		cur, rev = &latestIntent{Sequence: known.sequence}, known.revision
	}
	data, err := json.Marshal(li)
	if err != nil {
		return err
	}
	key := pair.key()
	for attempt := range 11 { // the remembered marker, then up to ten reads
		if attempt > 0 {
			if cur, rev, err = s.latest(ctx, key); err != nil {
				return err
			}
			if cur != nil && cur.Sequence >= li.Sequence {
				s.note(pair, notedMark{revision: rev, sequence: cur.Sequence})
				return nil
			}
		}
		var written uint64
		if cur == nil {
			written, err = s.kv.Create(ctx, key, data)
		} else {
			written, err = s.kv.Update(ctx, key, data, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		if err != nil {
			return fmt.Errorf("write latest intent %s: %w", key, err)
		}
		s.note(pair, notedMark{revision: written, sequence: li.Sequence})
		return nil
	}
	return fmt.Errorf("write latest intent %s: too many concurrent writers", key)
}

// noted returns what this process knows of pair's marker.
func (s *recordStore) noted(pair pairID) (notedMark, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.marks[pair]
	return m, ok
}

// note keeps m as pair's marker unless a newer one is known (handlers of the same pair may
// finish in any order).
func (s *recordStore) note(pair pairID, m notedMark) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.marks[pair]; ok && cur.sequence > m.sequence {
		return
	}
	if s.marks == nil || len(s.marks) >= maxNotedMarks {
		s.marks = make(map[pairID]notedMark)
	}
	s.marks[pair] = m
}
