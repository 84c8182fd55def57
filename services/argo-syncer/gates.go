package main

// The beforeInstall gate. argo-syncer alone decides whether an install waits for its
// beforeInstall trigger, because only it knows (from its informer) whether the Application
// exists. A waiting install intent is kept in argo-syncer's own KV bucket
// (events.BucketInstallGates), one entry per rule and Application, and announced with
// InstallGated, on which trigger-dispatcher delivers the webhook. A trigger outcome installs the
// intent only while the entry still holds that intent: a newer intent for the Application
// replaces the entry (or removes it, when it installs at once) and an uninstall removes it, so a
// late outcome of an intent nobody wants any more creates nothing. No stream history is read.
// An entry is written only after its intent was recorded as its pair's last decision
// (decisions.go), so the intent that records a pair's first decision skips the bucket: nothing of
// its pair can be waiting there.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
)

// gateEntry is one install intent waiting for its beforeInstall trigger.
type gateEntry struct {
	IntentID string `json:"intentId"`
	// IntentSequence is the intent's stream sequence, for the record.
	IntentSequence uint64               `json:"intentSequence,omitempty"`
	Application    string               `json:"application"`
	Intent         events.InstallIntent `json:"intent"`
	// Since is when the intent began to wait.
	Since time.Time `json:"since"`
}

// gateStore reads and writes the waiting intents in the enforcement-install-gates bucket.
type gateStore struct {
	kv jetstream.KeyValue
}

// gateKey is the bucket key of a rule's Application: the Application name of the pair,
// events.ApplicationName (a DNS label, so a valid key; with its 64-bit suffix, two pairs crafted
// to collide do not share an entry), and a digest of the rule, so that two rules naming the same
// Application do not share an entry. It is the pair's name even when its Application was written
// under a legacy name (names.go): a waiting install has no Application yet, and every path
// derives the key from the pair. Entries written under legacy keys are moved at start-up
// (moveLegacyKeys).
func gateKey(rule events.RuleRef, application string) string {
	sum := sha256.Sum256([]byte(rule.Namespace + "/" + rule.Name))
	return application + "." + hex.EncodeToString(sum[:8])
}

// moveLegacyKeys moves every entry whose key is not the one gateKey gives its intent (written
// by a version that named Applications with 32-bit suffixes) to that key, so that its trigger's
// outcome still finds and releases it; it returns how many it moved. It runs at start-up, before
// the consumer (argo-syncer runs one replica, so nothing else writes the bucket then). An entry
// already under the new key wins over the legacy one, which is dropped; a crash between the
// write and the delete leaves both, and the next start finishes the move.
func (s *gateStore) moveLegacyKeys(ctx context.Context) (int, error) {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return 0, fmt.Errorf("list install gates: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	var keys []string
	for key := range lister.Keys() {
		keys = append(keys, key)
	}
	moved := 0
	for _, key := range keys {
		e, rev, err := s.get(ctx, key)
		if err != nil {
			return moved, err
		}
		if e == nil {
			continue // dropped since the listing
		}
		app := events.ApplicationName(e.Intent.Cluster.Name, e.Intent.Enforcement.Name)
		want := gateKey(e.Intent.Rule, app)
		if key == want {
			continue
		}
		e.Application = app
		data, err := json.Marshal(e)
		if err != nil {
			return moved, fmt.Errorf("encode install gate %s: %w", want, err)
		}
		if _, err := s.kv.Create(ctx, want, data); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return moved, fmt.Errorf("move install gate %s to %s: %w", key, want, err)
		}
		if err := s.kv.Delete(ctx, key, jetstream.LastRevision(rev)); err != nil {
			return moved, fmt.Errorf("delete install gate %s: %w", key, err)
		}
		moved++
	}
	return moved, nil
}

// get returns the entry under key and its revision, or nil when no intent waits.
func (s *gateStore) get(ctx context.Context, key string) (*gateEntry, uint64, error) {
	return service.GetJSON[gateEntry](ctx, s.kv, key, "install gate")
}

// put makes e the intent waiting under key, replacing any other.
func (s *gateStore) put(ctx context.Context, key string, e *gateEntry) error {
	data, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode install gate %s: %w", key, err)
	}
	if _, err := s.kv.Put(ctx, key, data); err != nil {
		return fmt.Errorf("write install gate %s: %w", key, err)
	}
	return nil
}

// drop removes the entry under key, if there is one, and returns the intent that waited there
// (empty when none did). A key without entry costs one read and writes nothing.
func (s *gateStore) drop(ctx context.Context, key string) (string, error) {
	e, rev, err := s.get(ctx, key)
	if err != nil || e == nil {
		return "", err
	}
	if err := s.kv.Delete(ctx, key, jetstream.LastRevision(rev)); err != nil {
		return "", fmt.Errorf("delete install gate %s: %w", key, err)
	}
	return e.IntentID, nil
}
