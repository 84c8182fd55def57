package main

// The order of decisions. rule-engine decides, for each rule and cluster, what should be
// installed, and publishes its decisions in order; the stream sequence of an intent is its place
// in that order. A late or replayed intent (a dead letter replayed after the rule changed its
// mind, say) must not undo a newer one, so argo-syncer remembers, per rule, cluster and
// enforcement, the decision sequence (events.Meta.DecisionSequence: the original's stream
// sequence for a replay, else the intent's own) of the last intent it acted on, in its KV bucket
// events.BucketLastDecisions. An intent whose decision sequence is lower is stale: acknowledged,
// logged and counted, and nothing is written or published.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
)

// decisionRecord is the last intent argo-syncer acted on for one rule, cluster and enforcement.
type decisionRecord struct {
	// Sequence is the intent's decision sequence.
	Sequence uint64 `json:"sequence"`
	IntentID string `json:"intentId"`
	// Kind is "install" or "uninstall".
	Kind string `json:"kind"`
	// Install or Uninstall is the intent itself: the desired state that the resync re-asserts
	// (resync.go). Records written before it was kept have neither and are not resynced.
	Install   *events.InstallIntent   `json:"install,omitempty"`
	Uninstall *events.UninstallIntent `json:"uninstall,omitempty"`
	// Applied is set once an install whose intent has a beforeInstall trigger has been carried
	// out (its trigger let it through): only then may the resync create its Application again.
	Applied bool `json:"applied,omitempty"`
}

// installRecord and uninstallRecord are the records of an intent at decision sequence seq.
func installRecord(in *events.InstallIntent, seq uint64) decisionRecord {
	return decisionRecord{Sequence: seq, IntentID: in.ID(), Kind: "install", Install: in}
}

func uninstallRecord(in *events.UninstallIntent, seq uint64) decisionRecord {
	return decisionRecord{Sequence: seq, IntentID: in.ID(), Kind: "uninstall", Uninstall: in}
}

// decisionStore reads and writes decision records in the enforcement-last-decisions bucket.
type decisionStore struct {
	kv jetstream.KeyValue
}

// decisionKey is the bucket key of one rule's enforcement on one cluster: a readable prefix, the
// Application name as versions before 64-bit name suffixes computed it
// (events.LegacyApplicationName, a valid key), and a digest of the rule, cluster and
// enforcement. The digest (64 bits of all three) is what keeps keys apart, not the prefix: two
// pairs can share a name ("a-b" + "c", "a" + "b-c") or a 32-bit suffix, and are not ordered
// together. The prefix stays the legacy name so that every record keeps its key across the
// upgrade to 64-bit names (a record under a new key would leave the old one behind, for the
// resync to re-assert). The rule is its namespace and name, as the Application's ownership and
// the consumer's ordering know it, not its UID: an uninstall of a deleted rule replayed after a
// rule of the same name was created must still meet the newer rule's install.
func decisionKey(rule events.RuleRef, cluster, enforcement string) string {
	sum := sha256.Sum256([]byte(rule.Namespace + "/" + rule.Name + "\x00" + cluster + "\x00" + enforcement))
	return events.LegacyApplicationName(cluster, enforcement) + "." + hex.EncodeToString(sum[:8])
}

// admit records next as the last decision under key unless a newer one is recorded; then it
// returns that newer record and writes nothing. A redelivery (the recorded sequence itself)
// writes nothing either. A sequence of 0 (not read from the stream) carries no order: it is
// admitted and not recorded. Concurrent writers are settled by compare-and-set. first reports
// that next is the first decision recorded under key: no intent of the pair was acted on before,
// so none of them can be waiting for its beforeInstall trigger (gates.go).
//
// With likelyNew set (the pair has no Application yet, so most likely no record either) it
// first tries to create the record, one round trip instead of a read and a write; a record
// already there fails the create and is read and compared as usual.
func (s *decisionStore) admit(ctx context.Context, key string, next decisionRecord, likelyNew bool) (newer *decisionRecord, first bool, err error) {
	if next.Sequence == 0 {
		return nil, false, nil
	}
	if likelyNew {
		data, err := json.Marshal(next)
		if err != nil {
			return nil, false, fmt.Errorf("encode decision record %s: %w", key, err)
		}
		switch _, err := s.kv.Create(ctx, key, data); {
		case err == nil:
			return nil, true, nil
		case !errors.Is(err, jetstream.ErrKeyExists):
			return nil, false, fmt.Errorf("write decision record %s: %w", key, err)
		}
	}
	err = s.change(ctx, key, func(cur *decisionRecord) *decisionRecord {
		newer, first = nil, cur == nil
		switch {
		case cur != nil && cur.Sequence > next.Sequence:
			newer = cur
			return nil
		case cur != nil && cur.Sequence == next.Sequence:
			return nil
		}
		return &next
	})
	if err != nil {
		return nil, false, err
	}
	return newer, first, nil
}

// newer returns the record under key when it is newer than seq, else nil (also for seq 0).
func (s *decisionStore) newer(ctx context.Context, key string, seq uint64) (*decisionRecord, error) {
	if seq == 0 {
		return nil, nil
	}
	rec, _, err := service.GetJSON[decisionRecord](ctx, s.kv, key, "decision record")
	if err != nil || rec == nil || rec.Sequence <= seq {
		return nil, err
	}
	return rec, nil
}

// markApplied sets Applied on the record under key if it still is the decision at seq; a newer
// decision or a record already marked is left alone.
func (s *decisionStore) markApplied(ctx context.Context, key string, seq uint64) error {
	if seq == 0 {
		return nil
	}
	return s.change(ctx, key, func(cur *decisionRecord) *decisionRecord {
		if cur == nil || cur.Sequence != seq || cur.Applied {
			return nil
		}
		cur.Applied = true
		return cur
	})
}

// change writes what fn makes of the record under key (nil: write nothing; the current record
// is nil when there is none). When another writer got there first it reads the record again
// and asks fn again (compare-and-set, at most 5 attempts).
func (s *decisionStore) change(ctx context.Context, key string, fn func(cur *decisionRecord) *decisionRecord) error {
	for attempt := 0; ; attempt++ {
		cur, rev, err := service.GetJSON[decisionRecord](ctx, s.kv, key, "decision record")
		if err != nil {
			return err
		}
		next := fn(cur)
		if next == nil {
			return nil
		}
		data, err := json.Marshal(next)
		if err != nil {
			return fmt.Errorf("encode decision record %s: %w", key, err)
		}
		if cur == nil {
			_, err = s.kv.Create(ctx, key, data)
		} else {
			_, err = s.kv.Update(ctx, key, data, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) || attempt >= 4 {
			return fmt.Errorf("write decision record %s: %w", key, err)
		}
	}
}
