package main

// The beforeInstall gate. argo-syncer alone decides whether an install waits for its
// beforeInstall trigger, because only it knows (from its informer) whether the Application
// exists. A waiting install intent is kept in argo-syncer's own KV bucket
// (events.BucketInstallGates), one entry per rule and Application, and announced with
// InstallGated, on which trigger-dispatcher delivers the webhook. A trigger outcome installs the
// intent only while the entry still holds that intent: a newer intent for the Application
// replaces the entry (or removes it, when it installs at once) and an uninstall removes it, so a
// late outcome of an intent nobody wants any more creates nothing. No stream history is read.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

// gateKey is the bucket key of a rule's Application: the Application name (a DNS label, so a
// valid key) and a digest of the rule, so that two rules naming the same Application do not
// share an entry.
func gateKey(rule events.RuleRef, application string) string {
	sum := sha256.Sum256([]byte(rule.Namespace + "/" + rule.Name))
	return application + "." + hex.EncodeToString(sum[:8])
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
