package events

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Names of the JetStream objects Enforcement uses.
const (
	// StreamName is the one stream that keeps every event (and every dead letter) for audit.
	StreamName = "ENFORCEMENT"

	// Consumers, one per consuming service: the catalog routes event types to these names.
	// The first four are also the names of their durable consumers in DefaultTopology.
	ConsumerRuleEngine        = "rule-engine"
	ConsumerArgoSyncer        = "argo-syncer"
	ConsumerTriggerDispatcher = "trigger-dispatcher"
	// ConsumerSourceScanner receives the operator's releases of held removals.
	ConsumerSourceScanner = "source-scanner"
	// ConsumerClaimWriter is policy-watcher's claim writer. It has one durable consumer per
	// managed cluster, ClaimWriterConsumer(cluster), which receives that cluster's events only.
	ConsumerClaimWriter = "claim-writer"

	// Key-value buckets.
	BucketInventory       = "enforcement-inventory"         // source-scanner: clusters per source, scan records
	BucketRenderCache     = "enforcement-render-cache"      // rule-engine: rendered enforcements per (rule generation, cluster)
	BucketTriggers        = "enforcement-triggers"          // trigger-dispatcher: delivery records
	BucketRuleEngineState = "enforcement-rule-engine-state" // rule-engine: cluster view and per (rule, cluster) install records

	// BucketInstallGates holds argo-syncer's install intents that wait for their beforeInstall
	// trigger, one entry per rule and Application.
	BucketInstallGates = "enforcement-install-gates"

	// BucketLastDecisions holds argo-syncer's record of the last intent it acted on per rule,
	// cluster and enforcement (its Meta.DecisionSequence), so that a late or replayed intent
	// never undoes a newer one. Entries expire with the stream's MaxAge: after that no older
	// intent can be replayed from the stream any more.
	BucketLastDecisions = "enforcement-last-decisions"
)

// sharedConsumers are the consumers with one durable consumer for the whole installation, in
// the order DefaultTopology declares them.
var sharedConsumers = []string{ConsumerRuleEngine, ConsumerArgoSyncer, ConsumerTriggerDispatcher, ConsumerSourceScanner}

// Topology is the JetStream set-up as data: the stream, the durable consumers and the key-value
// buckets. Apply creates what is missing and updates what differs, so every service can apply it
// at start-up without coordination.
type Topology struct {
	Stream    jetstream.StreamConfig
	Consumers []jetstream.ConsumerConfig
	Buckets   []jetstream.KeyValueConfig
}

// TopologyOptions tune the topology for an installation. The zero value gives the defaults.
type TopologyOptions struct {
	// Replicas for the stream, consumers and buckets; 1 by default, 3 on a production NATS cluster.
	// Apply never lowers the replicas of an object that exists.
	Replicas int
	// MaxBytes caps the size of the stream in bytes (the oldest events go first); 0 leaves it
	// unlimited. Apply sets it on a new stream and raises a smaller cap, but never lowers or
	// adds a cap on a stream that exists: lowering it is an operator's edit of the stream.
	MaxBytes int64
	// MaxAge is how long events are kept for audit and replay; 30 days by default.
	MaxAge time.Duration
	// DuplicateWindow is how long the server remembers event ids to drop republishes; 20 minutes
	// by default (longer than a scan interval and a restart).
	DuplicateWindow time.Duration
	// AckWait is how long a consumer may hold a message before the server redelivers it; 30 s by
	// default. The consumer helper extends it while a handler works or waits for a retry.
	AckWait time.Duration
	// MaxDeliver bounds deliveries of one message across crashes; 10 by default.
	MaxDeliver int
}

func (o TopologyOptions) withDefaults() TopologyOptions {
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.MaxAge == 0 {
		o.MaxAge = 30 * 24 * time.Hour
	}
	if o.DuplicateWindow == 0 {
		o.DuplicateWindow = 20 * time.Minute
	}
	if o.AckWait == 0 {
		o.AckWait = 30 * time.Second
	}
	if o.MaxDeliver == 0 {
		o.MaxDeliver = 10
	}
	return o
}

// DefaultTopology returns Enforcement's topology with the given options.
func DefaultTopology(opts TopologyOptions) Topology {
	o := opts.withDefaults()
	consumers := make([]jetstream.ConsumerConfig, 0, len(sharedConsumers))
	for _, name := range sharedConsumers {
		consumers = append(consumers, jetstream.ConsumerConfig{
			Durable:     name,
			Description: "Enforcement " + name,
			// One filter per event type the catalog routes to the consumer, so that it receives
			// exactly those (the rule engine, say, the trigger outcomes but not the per-attempt
			// trigger.attempted events, which are for audit and metrics).
			FilterSubjects: filterSubjects(name, nil),
			DeliverPolicy:  jetstream.DeliverAllPolicy,
			AckPolicy:      jetstream.AckExplicitPolicy,
			AckWait:        o.AckWait,
			MaxDeliver:     o.MaxDeliver,
			MaxAckPending:  4096,
			Replicas:       o.Replicas,
		})
	}
	return Topology{
		Stream: jetstream.StreamConfig{
			Name:        StreamName,
			Description: "Every Enforcement event, kept for audit and replay",
			Subjects:    []string{SubjectRoot + ".>"},
			Storage:     jetstream.FileStorage,
			Retention:   jetstream.LimitsPolicy,
			Discard:     jetstream.DiscardOld,
			MaxAge:      o.MaxAge,
			MaxBytes:    o.MaxBytes,
			Duplicates:  o.DuplicateWindow,
			Replicas:    o.Replicas,
		},
		Consumers: consumers,
		Buckets: []jetstream.KeyValueConfig{
			{Bucket: BucketInventory, Description: "source-scanner inventory", Storage: jetstream.FileStorage, History: 1, Replicas: o.Replicas},
			{Bucket: BucketRenderCache, Description: "rule-engine render cache", Storage: jetstream.FileStorage, History: 1, Replicas: o.Replicas},
			{Bucket: BucketTriggers, Description: "trigger-dispatcher delivery records", Storage: jetstream.FileStorage, History: 1, Replicas: o.Replicas, TTL: 30 * 24 * time.Hour},
			{Bucket: BucketRuleEngineState, Description: "rule-engine cluster view and install records", Storage: jetstream.FileStorage, History: 1, Replicas: o.Replicas},
			{Bucket: BucketInstallGates, Description: "argo-syncer install intents waiting for beforeInstall", Storage: jetstream.FileStorage, History: 1, Replicas: o.Replicas},
			{Bucket: BucketLastDecisions, Description: "argo-syncer last decision acted on per rule, cluster and enforcement", Storage: jetstream.FileStorage, History: 1, Replicas: o.Replicas, TTL: o.MaxAge},
		},
	}
}

// ClaimWriterConsumer is the durable consumer of one managed cluster's claim writer
// (policy-watcher): it sees only that cluster's events of the types the catalog routes to
// ConsumerClaimWriter.
func ClaimWriterConsumer(cluster string, opts TopologyOptions) jetstream.ConsumerConfig {
	o := opts.withDefaults()
	name := ConsumerClaimWriter + "-" + EscapeToken(cluster)
	cfg := jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "Enforcement claim writer for cluster " + cluster,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       o.AckWait,
		MaxDeliver:    o.MaxDeliver,
		MaxAckPending: 64,
		Replicas:      o.Replicas,
	}
	// One type today, so one FilterSubject, as the consumer was always declared.
	if subjects := filterSubjects(ConsumerClaimWriter, map[string]string{"cluster": cluster}); len(subjects) == 1 {
		cfg.FilterSubject = subjects[0]
	} else {
		cfg.FilterSubjects = subjects
	}
	return cfg
}

// Apply creates or updates the stream, the consumers and the buckets. It is idempotent: applying
// the same topology twice changes nothing. It never lowers what exists: the replicas and limits
// of a stream or bucket (and the replicas of a consumer) that an operator made bigger are kept
// (keepStreamLimits, keepBucketLimits), and consumers have at least the stream's replicas.
// Errors name the object that failed.
func (t Topology) Apply(ctx context.Context, js jetstream.JetStream) error {
	stream := t.Stream
	have, err := existingStream(ctx, js, stream.Name)
	if err != nil {
		return err
	}
	if have != nil {
		stream = keepStreamLimits(stream, *have)
	}
	if have == nil || !streamHas(*have, stream) {
		if _, err := js.CreateOrUpdateStream(ctx, stream); err != nil {
			return fmt.Errorf("apply stream %s: %w", stream.Name, err)
		}
	}
	for _, c := range t.Consumers {
		c.Replicas = max(c.Replicas, stream.Replicas)
		if err := applyConsumer(ctx, js, stream.Name, c); err != nil {
			return fmt.Errorf("apply consumer %s: %w", c.Durable, err)
		}
	}
	for _, b := range t.Buckets {
		if err := applyBucket(ctx, js, b); err != nil {
			return fmt.Errorf("apply bucket %s: %w", b.Bucket, err)
		}
	}
	return nil
}

// streamHas reports whether the stream's configuration have already has every setting of want
// that the topology decides, so that applying it again sends no update (every service applies
// the topology at every start, and the server handles concurrent updates of one stream badly).
func streamHas(have, want jetstream.StreamConfig) bool {
	return have.Description == want.Description && slices.Equal(have.Subjects, want.Subjects) &&
		have.Storage == want.Storage && have.Retention == want.Retention && have.Discard == want.Discard &&
		have.MaxAge == want.MaxAge && have.MaxBytes == want.MaxBytes && have.Duplicates == want.Duplicates &&
		have.Replicas == want.Replicas && have.MaxMsgs == want.MaxMsgs &&
		have.MaxMsgsPerSubject == want.MaxMsgsPerSubject && have.MaxMsgSize == want.MaxMsgSize &&
		have.MaxConsumers == want.MaxConsumers && have.AllowDirect == want.AllowDirect
}

// applyBucket creates the bucket b, or brings the stream of an existing one up to b (never
// lower: keepBucketLimits). A replicated bucket is read from its stream's leader only
// (AllowDirect off): a direct get may be answered by any replica, and one that is behind (a
// node just restarted, catching up) answers a key written a moment ago with "not found" or an
// older value. That broke read-your-writes for every service on a NATS cluster: a delivery
// record armed a moment before read as missing (an afterInstall never delivered), a view marker
// read as missing. An existing bucket's stream is updated directly, not through
// CreateOrUpdateKeyValue, which turns direct gets back on: a service opening the bucket at that
// moment would read from followers for its whole life.
func applyBucket(ctx context.Context, js jetstream.JetStream, b jetstream.KeyValueConfig) error {
	name := bucketStream(b.Bucket)
	have, err := existingStream(ctx, js, name)
	if err != nil {
		return err
	}
	if have == nil {
		if _, err := js.CreateOrUpdateKeyValue(ctx, b); err != nil {
			return err
		}
		if have, err = existingStream(ctx, js, name); err != nil || have == nil {
			return fmt.Errorf("read the stream of the new bucket: %w", err)
		}
		want := *have
		want.AllowDirect = want.AllowDirect && want.Replicas <= 1
		return updateStreamIfChanged(ctx, js, *have, want)
	}
	b = keepBucketLimits(b, *have)
	want := *have
	want.Replicas = b.Replicas
	want.MaxBytes = higherLimit(have.MaxBytes, b.MaxBytes)
	want.MaxMsgSize = b.MaxValueSize
	if b.MaxValueSize == 0 {
		want.MaxMsgSize = have.MaxMsgSize
	}
	if b.TTL > 0 {
		want.MaxAge = b.TTL
	}
	want.MaxMsgsPerSubject = max(have.MaxMsgsPerSubject, int64(b.History))
	want.AllowDirect = have.AllowDirect && want.Replicas <= 1
	if b.Description != "" {
		want.Description = b.Description
	}
	return updateStreamIfChanged(ctx, js, *have, want)
}

// updateStreamIfChanged updates the stream to want unless it has every setting the topology
// decides already (streamHas): the server fills in others (metadata, defaults) that a config
// read back never equals, and an update on every start would have every service update every
// bucket at once.
func updateStreamIfChanged(ctx context.Context, js jetstream.JetStream, have, want jetstream.StreamConfig) error {
	if streamHas(have, want) {
		return nil
	}
	_, err := js.UpdateStream(ctx, want)
	return err
}

// errCodeConsumerReplicasExceedStream is JetStream's error code for a consumer with more
// replicas than its stream has.
const errCodeConsumerReplicasExceedStream jetstream.ErrorCode = 10126

// scaleUpWait bounds how long applyConsumer waits for a stream's new replicas.
const scaleUpWait = 30 * time.Second

// applyConsumer creates or updates the consumer cfg of stream. Right after the stream was scaled
// up the cluster may still hold the stream's old replica count for a moment and refuse the
// consumer's new one; applyConsumer retries that refusal until the scale-up has landed.
func applyConsumer(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig) error {
	deadline := time.Now().Add(scaleUpWait)
	for {
		_, err := js.CreateOrUpdateConsumer(ctx, stream, cfg)
		var apiErr *jetstream.APIError
		if err == nil || !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeConsumerReplicasExceedStream || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// bucketStream is the name of the stream that stores a key-value bucket.
func bucketStream(bucket string) string { return "KV_" + bucket }

// existingStream returns the configuration of the stream name as the server has it, or nil
// when there is no such stream.
func existingStream(ctx context.Context, js jetstream.JetStream, name string) (*jetstream.StreamConfig, error) {
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read stream %s: %w", name, err)
	}
	cfg := s.CachedInfo().Config
	return &cfg, nil
}

// keepStreamLimits returns want with the replicas and limits of the existing stream have where
// those are higher: an operator may have raised them (nats stream edit), and a service that
// starts with the defaults must not undo that.
func keepStreamLimits(want, have jetstream.StreamConfig) jetstream.StreamConfig {
	want.Replicas = max(want.Replicas, have.Replicas)
	want.MaxBytes = higherLimit(have.MaxBytes, want.MaxBytes)
	want.MaxMsgs = higherLimit(have.MaxMsgs, want.MaxMsgs)
	want.MaxMsgsPerSubject = higherLimit(have.MaxMsgsPerSubject, want.MaxMsgsPerSubject)
	want.MaxMsgSize = int32(higherLimit(int64(have.MaxMsgSize), int64(want.MaxMsgSize)))
	want.MaxConsumers = int(higherLimit(int64(have.MaxConsumers), int64(want.MaxConsumers)))
	want.MaxAge = time.Duration(higherLimit(int64(have.MaxAge), int64(want.MaxAge)))
	want.Duplicates = max(want.Duplicates, have.Duplicates)
	return want
}

// keepBucketLimits is keepStreamLimits for a key-value bucket, have being its stream's
// configuration (History is the stream's messages per subject, TTL its MaxAge).
func keepBucketLimits(want jetstream.KeyValueConfig, have jetstream.StreamConfig) jetstream.KeyValueConfig {
	want.Replicas = max(want.Replicas, have.Replicas)
	want.MaxBytes = higherLimit(have.MaxBytes, want.MaxBytes)
	want.MaxValueSize = int32(higherLimit(int64(have.MaxMsgSize), int64(want.MaxValueSize)))
	want.TTL = time.Duration(higherLimit(int64(have.MaxAge), int64(want.TTL)))
	if have.MaxMsgsPerSubject > int64(want.History) && have.MaxMsgsPerSubject <= jetstream.KeyValueMaxHistory {
		want.History = uint8(have.MaxMsgsPerSubject)
	}
	return want
}

// higherLimit is the limit to apply to an object whose current limit is have, when the
// configuration wants want. A limit of 0 or less is none (JetStream reports an unset limit as
// -1, an unset age as 0): none is the highest limit there is, and a want of none has no
// opinion, so both keep have. Otherwise the higher of the two.
func higherLimit(have, want int64) int64 {
	if have <= 0 || want <= 0 {
		return have
	}
	return max(have, want)
}

// Consumer returns the declared config of the named durable consumer.
func (t Topology) Consumer(name string) (jetstream.ConsumerConfig, bool) {
	for _, c := range t.Consumers {
		if c.Durable == name {
			return c, true
		}
	}
	return jetstream.ConsumerConfig{}, false
}
