package main

// The resync re-asserts the desired state. Intents are handled once; what happens to their
// objects afterwards is not an event: someone deletes an Application, AppProject or cluster
// Secret by hand, edits a field argo-syncer owns, or the API server was down for longer than the
// consumer's retries and the intent became a dead letter. Every RESYNC_INTERVAL argo-syncer walks
// its last decisions (decisions.go: per rule, cluster and enforcement, the last intent it acted
// on, kept whole) and puts back what differs:
//
//   - the last decision is an install: its cluster Secret, AppProject and Application are made
//     to exist as rendered again (a missing one is created, a drifted one applied). Triggers
//     never fire again: nothing waits on beforeInstall, the outcome is published with
//     Created=false and Restored set. An install still waiting for its beforeInstall trigger is
//     left to the trigger, and one whose trigger never let it through is not created;
//   - the last decision is an uninstall whose Application is still there: the uninstall is
//     carried out again (the Application is deleted per its policy, the cluster unregistered
//     when nothing else targets it).
//
// The resync acts under the cluster's lock and reads the decision again under it, so an intent
// handled at the same time is never undone: an Application that no rule wants any more is
// never recreated. In steady state a round costs one KV read per record and no API request.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
)

// ResyncResult counts what one resync round did.
type ResyncResult struct {
	// Records is how many decision records were read.
	Records int
	// Restored is how many installs or uninstalls had to be carried out again.
	Restored int
	// Failed is how many could not be restored this round (logged; the next round tries again).
	Failed int
}

// RunResync runs a resync round every interval until ctx ends. A round that fails is logged
// and the next one starts on time.
func (h *Handler) RunResync(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			res, err := h.Resync(ctx, now.UTC().Format(time.RFC3339))
			if err != nil && ctx.Err() == nil {
				h.logger.Error("Resync round failed", "error", err)
			}
			if res.Restored > 0 || res.Failed > 0 {
				h.logger.Info("Resynced", "records", res.Records, "restored", res.Restored, "failed", res.Failed)
			}
		}
	}
}

// Resync runs one round over every decision record; round names it in the outcomes it
// publishes (Restored). Errors of one record are counted and logged, not returned; the error
// is for a round that could not list the records.
func (h *Handler) Resync(ctx context.Context, round string) (ResyncResult, error) {
	var res ResyncResult
	lister, err := h.decisions.kv.ListKeys(ctx)
	if err != nil {
		return res, fmt.Errorf("list decision records: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	status, err := h.decisions.kv.Status(ctx)
	if err != nil {
		return res, fmt.Errorf("read bucket %s: %w", events.BucketLastDecisions, err)
	}
	for key := range lister.Keys() {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		res.Records++
		restored, err := h.resyncRecord(ctx, key, round, status.TTL())
		switch {
		case err != nil:
			res.Failed++
			h.metrics.intent("resync", "failed")
			h.logger.Warn("Could not restore desired state", "record", key, "error", err)
		case restored:
			res.Restored++
		}
	}
	return res, nil
}

// resyncRecord restores one record's decision; it reports whether anything had to be done. An
// install record older than half the bucket's TTL is written again first: records expire with
// the stream's retention (no older intent can be replayed after that), but the desired state an
// install holds must not. Uninstall records (tombstones) are left to expire.
func (h *Handler) resyncRecord(ctx context.Context, key, round string, ttl time.Duration) (bool, error) {
	entry, err := h.decisions.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil // deleted or expired since the listing
	}
	if err != nil {
		return false, fmt.Errorf("read decision record %s: %w", key, err)
	}
	var rec decisionRecord
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		return false, fmt.Errorf("decode decision record %s: %w", key, err)
	}
	if rec.Install != nil && ttl > 0 && time.Since(entry.Created()) > ttl/2 {
		_, err := h.decisions.kv.Update(ctx, key, entry.Value(), entry.Revision())
		if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return false, fmt.Errorf("refresh decision record %s: %w", key, err)
		}
	}
	switch {
	case rec.Install != nil:
		return h.restoreInstall(ctx, key, &rec, round)
	case rec.Uninstall != nil:
		return h.restoreUninstall(ctx, key, &rec, round)
	}
	return false, nil // a record without its intent (written by an older version)
}

// restoreInstall re-asserts an install decision.
func (h *Handler) restoreInstall(ctx context.Context, key string, rec *decisionRecord, round string) (bool, error) {
	in := rec.Install
	app := events.ApplicationName(in.Cluster.Name, in.Enforcement.Name)
	waiting, _, err := h.gates.get(ctx, gateKey(in.Rule, app))
	if err != nil || waiting != nil {
		return false, err // its beforeInstall trigger decides
	}
	// An intent with a beforeInstall trigger that was never carried out has not been let
	// through by its trigger: the resync must not create its Application behind the trigger.
	create := in.Triggers == nil || in.Triggers.BeforeInstall == nil || rec.Applied
	res, err := h.syncer.Restore(ctx, in, create, h.stillDecided(key, rec.Sequence))
	if err != nil || res.Writes == 0 {
		return false, err
	}
	h.metrics.intent("install", "restored")
	_, err = h.pub.Publish(ctx, &events.InstallSucceeded{
		IntentID: in.ID(), Rule: in.Rule, Cluster: in.Cluster.Name, Enforcement: in.Enforcement.Name,
		Application: res.Application, SpecHash: in.SpecHash, Restored: round,
	})
	return true, err
}

// restoreUninstall carries out an uninstall decision again when its Application is still there.
func (h *Handler) restoreUninstall(ctx context.Context, key string, rec *decisionRecord, round string) (bool, error) {
	in := rec.Uninstall
	if !h.syncer.holdsApplication(in) {
		return false, nil
	}
	res, err := h.syncer.RestoreUninstall(ctx, in, h.stillDecided(key, rec.Sequence))
	if err != nil || !res.Deleted {
		return false, err
	}
	h.metrics.intent("uninstall", "restored")
	_, err = h.pub.Publish(ctx, &events.UninstallDone{
		IntentID: in.ID(), Rule: in.Rule, Cluster: in.Cluster.Name, Enforcement: in.Enforcement,
		Application: res.Application, Deleted: true, Restored: round,
	})
	return true, err
}

// stillDecided returns a check that the record under key is still the decision at seq.
func (h *Handler) stillDecided(key string, seq uint64) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		rec, _, err := service.GetJSON[decisionRecord](ctx, h.decisions.kv, key, "decision record")
		return err == nil && rec != nil && rec.Sequence == seq, err
	}
}

// Restore makes an install intent's objects exist as rendered again, under the cluster's lock,
// if decided still holds there: the cluster Secret, the AppProject and the Application. With
// create false a missing Application is not created (its beforeInstall trigger never let it
// through). It never waits for a trigger. Writes is 0 when everything was in place.
func (s *Syncer) Restore(ctx context.Context, in *events.InstallIntent, create bool, decided func(context.Context) (bool, error)) (InstallResult, error) {
	unlock := s.clusters.lock(in.Cluster.Name)
	defer unlock()
	name := s.names(in.Cluster.Name, in.Enforcement.Name).application
	if ok, err := decided(ctx); err != nil || !ok {
		return InstallResult{Application: name}, err
	}
	_, exists, terminating := s.apps.get(name)
	if terminating || (!exists && !create) {
		return InstallResult{Application: name}, nil
	}
	res, err := s.install(ctx, installing{}, in, false, false) // credentials are refreshed by intents only
	if err == nil && res.Writes > 0 {
		s.logger.Info("Restored desired state", "application", name, "cluster", in.Cluster.Name, "rule", in.Rule.String(), "writes", res.Writes)
	}
	return res, err
}

// holdsApplication reports, from the cache, whether the uninstall intent's Application is still
// there for its rule to delete (under its new or its legacy name, names.go).
func (s *Syncer) holdsApplication(in *events.UninstallIntent) bool {
	unlock := s.clusters.lock(in.Cluster.Name)
	defer unlock()
	app, exists, terminating := s.apps.get(s.names(in.Cluster.Name, in.Enforcement).application)
	return exists && !terminating && owned(app) && ruleOwns(app, in.Rule) && samePair(app, in.Cluster.Name, in.Enforcement)
}

// RestoreUninstall carries out an uninstall intent again, under the cluster's lock, if decided
// still holds there.
func (s *Syncer) RestoreUninstall(ctx context.Context, in *events.UninstallIntent, decided func(context.Context) (bool, error)) (UninstallResult, error) {
	unlock := s.clusters.lock(in.Cluster.Name)
	defer unlock()
	if ok, err := decided(ctx); err != nil || !ok {
		return UninstallResult{Application: events.ApplicationName(in.Cluster.Name, in.Enforcement)}, err
	}
	res, err := s.uninstall(ctx, in)
	if err == nil && res.Deleted {
		s.logger.Info("Restored uninstall", "application", res.Application, "cluster", in.Cluster.Name, "rule", in.Rule.String())
	}
	return res, err
}
