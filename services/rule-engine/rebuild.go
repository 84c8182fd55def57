package main

// A lost state bucket. The engine's cluster view lives in the state bucket
// (events.BucketRuleEngineState); the topology recreates the bucket empty when it was lost
// (deleted by hand, or a store that did not survive), and the scanner announces a cluster only
// when it changes. Without its view the engine would match no cluster until each one changed
// again. So a state bucket without the view marker has its cluster view rebuilt from the
// cluster events the stream keeps, before the engine loads it. The per-(rule, cluster) records
// are not rebuilt: the first evaluation of every rule re-derives them as install intents (the
// same deterministic ids; argo-syncer writes nothing for what exists), and a pair the engine
// does not know is never uninstalled, so a lost bucket costs no Application.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// viewMarkerKey marks a state bucket whose cluster view is complete: written once the view was
// rebuilt (or found empty in a new installation). Its absence means the bucket is new.
const viewMarkerKey = "meta.view"

// rebuildConsumer is the name of the short-lived consumer that reads the cluster events back.
// Fixed, so that the NATS authorization can allow it (deploy/nats/authorization.conf).
const rebuildConsumer = "rule-engine-rebuild"

// clusterEventSubjects are the subjects of the events that make the cluster view.
var clusterEventSubjects = []string{
	events.SubjectRoot + ".cluster.appeared.>",
	events.SubjectRoot + ".cluster.updated.>",
	events.SubjectRoot + ".cluster.gone.>",
}

// restoreLostView rebuilds the cluster view in the state bucket from the stream when the bucket
// has no view marker, and then writes the marker. Records already in the bucket that are newer
// than an event (clusterRecord.newerThan) are kept. It does nothing when the marker is there.
func restoreLostView(ctx context.Context, js jetstream.JetStream, st *kvStore, log *slog.Logger) error {
	_, err := st.state.Get(ctx, viewMarkerKey)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return fmt.Errorf("read %s: %w", viewMarkerKey, err)
	}
	stored, _, err := st.load(ctx)
	if err != nil {
		return fmt.Errorf("rebuild cluster view: %w", err)
	}
	start := time.Now()
	view, read, err := clusterViewFromStream(ctx, js, maps.Clone(stored))
	if err != nil {
		return fmt.Errorf("rebuild cluster view: %w", err)
	}
	for cid, rec := range view {
		if stored[cid] == rec {
			continue
		}
		if err := st.putCluster(ctx, cid, rec); err != nil {
			return fmt.Errorf("rebuild cluster view: %w", err)
		}
	}
	for cid := range stored {
		if view[cid] == nil {
			if err := st.deleteCluster(ctx, cid); err != nil {
				return fmt.Errorf("rebuild cluster view: %w", err)
			}
		}
	}
	if _, err := st.state.Put(ctx, viewMarkerKey, []byte(time.Now().UTC().Format(time.RFC3339))); err != nil {
		return fmt.Errorf("write %s: %w", viewMarkerKey, err)
	}
	if read > 0 || len(stored) > 0 {
		log.Warn("State bucket had no cluster view; rebuilt it from the stream",
			"events", read, "clusters", len(view), "took", time.Since(start).Round(time.Millisecond).String())
	}
	return nil
}

// clusterViewFromStream applies every cluster event the stream keeps, in stream order, over
// the records in view (which it changes and returns), and returns the number of events read.
func clusterViewFromStream(ctx context.Context, js jetstream.JetStream, view map[string]*clusterRecord) (map[string]*clusterRecord, int, error) {
	cons, err := js.CreateOrUpdateConsumer(ctx, events.StreamName, jetstream.ConsumerConfig{
		Name:              rebuildConsumer,
		Description:       "rule-engine rebuilding its cluster view after its state bucket was lost",
		FilterSubjects:    clusterEventSubjects,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return nil, 0, fmt.Errorf("create consumer %s: %w", rebuildConsumer, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = js.DeleteConsumer(dctx, events.StreamName, rebuildConsumer) // it expires by itself otherwise
	}()
	if cons.CachedInfo().NumPending == 0 {
		return view, 0, nil
	}
	read := 0
	for {
		batch, err := cons.FetchNoWait(1000)
		if err != nil {
			return nil, read, fmt.Errorf("read cluster events: %w", err)
		}
		n, end := 0, false
		for msg := range batch.Messages() {
			n++
			md, err := msg.Metadata()
			if err != nil {
				return nil, read, fmt.Errorf("read cluster events: %w", err)
			}
			applyToView(view, msg, md.Sequence.Stream)
			end = md.NumPending == 0
		}
		read += n
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, read, fmt.Errorf("read cluster events: %w", err)
		}
		if end || n == 0 {
			return view, read, nil
		}
	}
}

// applyToView applies one cluster event to the view, as applyCluster and applyClusterGone
// would, without evaluating rules. A message that does not decode is skipped: the consumer
// dead-lettered it when it first came.
func applyToView(view map[string]*clusterRecord, msg jetstream.Msg, seq uint64) {
	ev, meta, err := events.Decode(msg.Subject(), msg.Headers(), msg.Data())
	if err != nil {
		return
	}
	meta.Sequence = seq
	seq = meta.DecisionSequence()
	switch e := ev.(type) {
	case *events.ClusterAppeared:
		putInView(view, e.Cluster, e.Revision, seq)
	case *events.ClusterUpdated:
		putInView(view, e.Cluster, e.Revision, seq)
	case *events.ClusterGone:
		cid := clusterID(e.Source.ID, e.Key)
		if !view[cid].newerThan(e.Revision, seq) {
			delete(view, cid)
		}
	}
}

func putInView(view map[string]*clusterRecord, c events.Cluster, revision, seq uint64) {
	cid := clusterID(c.Source.ID, c.Key)
	if !view[cid].newerThan(revision, seq) {
		view[cid] = &clusterRecord{Cluster: c, Revision: revision, Sequence: seq}
	}
}
