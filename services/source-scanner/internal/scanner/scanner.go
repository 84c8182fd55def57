// Package scanner is the heart of source-scanner: it turns complete listings of a cluster source
// into cluster appeared / updated / gone events by diffing them against an inventory kept in a
// JetStream key-value bucket, and it enforces the deletion safety rules of design.md.
//
// Why it is shaped this way: the worst incidents of this field started in a component like this
// one (Argo CD's ApplicationSet deleted every Application when a cluster listing failed). So a
// listing that is failed, partial, timed out or suspiciously empty changes nothing and publishes
// a SourceDegraded event; a cluster is gone only after it was absent from complete listings for a
// grace period; and a breaker holds removals when too many clusters vanish at once, until an
// operator releases them.
//
// Crash safety. Every event carries the KV revision of the record write that announced it, and
// its id is built from that revision, so a republish is dropped by the stream's duplicate window.
// A scan therefore (1) writes each changed record, marked with the event it announces, (2)
// publishes the events and waits for the stream's acknowledgements, (3) moves the source's
// "published" watermark to the highest revision written. A crash between (1) and (3) leaves
// records above the watermark; the next scan (in this or a new process) republishes exactly
// those before it lists anything. Nothing is lost, and what is repeated is deduplicated by id.
package scanner

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
)

// Lister lists every cluster of one source. A nil error promises a complete listing; anything
// short of that (an error answer, a failed page, a timeout, a body that does not parse) must be
// an error, preferably a DegradedError naming the reason. Clusters need Key and Name; the
// scanner fills in Source, keeping a Source.SecretName the lister set for that cluster.
type Lister interface {
	List(ctx context.Context) ([]events.Cluster, error)
}

// ListerFunc adapts a function to Lister.
type ListerFunc func(ctx context.Context) ([]events.Cluster, error)

// List calls f.
func (f ListerFunc) List(ctx context.Context) ([]events.Cluster, error) { return f(ctx) }

// PagedLister is a Lister that can also hand its listing over page by page as it fetches it, so
// that the scanner diffs each page and lets it go, holding one page of a large source at a time
// rather than the whole listing. The listing stays all or nothing: the scanner changes nothing
// until ListPages returns nil, and an error after some pages changes nothing. ListPages calls
// page for each page in order, one at a time; it must not change or reuse a page's clusters
// afterwards (the scanner keeps those that changed), and it returns an error of page's, wrapped
// or not.
type PagedLister interface {
	Lister
	ListPages(ctx context.Context, page func([]events.Cluster) error) error
}

// ListAll collects the pages listPages hands over into one listing: the List of a PagedLister.
func ListAll(ctx context.Context, listPages func(context.Context, func([]events.Cluster) error) error) ([]events.Cluster, error) {
	var listing []events.Cluster
	err := listPages(ctx, func(page []events.Cluster) error {
		listing = append(listing, page...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return listing, nil
}

// Source is one source to scan: its identity, how to list it, and the operator's releases of
// held removals.
type Source struct {
	Ref    events.SourceRef
	Lister Lister
	// Releases are the release annotations of the rules in the operator namespace that use the
	// source, each naming one trip (see releasedTrips).
	Releases []Release
	// LegacyName, when set, returns the name versions before 64-bit name suffixes published for
	// a listed cluster (events.LegacyObjectName of its provider name). A cluster that the
	// inventory remembers under that name, in this source or, by identity, in another, keeps it
	// (names.go). Set for the sources whose cluster names were normalised (eks, gke), whose
	// cluster Key names the cluster at its provider; nil for the others.
	LegacyName func(c events.Cluster) string
}

// Publisher is the part of events.Publisher the scanner needs.
type Publisher interface {
	PublishAll(ctx context.Context, evs []events.Event) error
}

// Config tunes the safety rules. Zero values get the defaults of design.md.
type Config struct {
	// GracePeriod is how long a cluster must be absent from complete listings before it is
	// gone (GONE_GRACE_PERIOD, default 10m).
	GracePeriod time.Duration
	// MaxRemovalFraction caps removals per source and scan at max(1, fraction × known)
	// (MAX_REMOVAL_FRACTION, default 0.1).
	MaxRemovalFraction float64
	// ListTimeout bounds one listing; a listing that takes longer is degraded (default 60s).
	ListTimeout time.Duration
	// Now is the clock; tests inject one so that grace periods pass without sleeping.
	Now func() time.Time
	// OperatorNamespace is where a release annotation is honoured (OPERATOR_NAMESPACE, default
	// "enforcement"); the RemovalsHeld message names it.
	OperatorNamespace string
}

func (c Config) withDefaults() Config {
	if c.GracePeriod == 0 {
		c.GracePeriod = 10 * time.Minute
	}
	if c.MaxRemovalFraction == 0 {
		c.MaxRemovalFraction = 0.1
	}
	if c.ListTimeout == 0 {
		c.ListTimeout = time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.OperatorNamespace == "" {
		c.OperatorNamespace = "enforcement"
	}
	return c
}

// Result says what one scan of a source did.
type Result struct {
	// Scan is the source's scan number (persisted, so it keeps counting across restarts).
	Scan uint64
	// Complete is true when the listing was complete and diffed against the inventory.
	Complete bool
	// Reason is the degraded reason published by this scan, if any (RemovalsHeld may come with
	// a complete listing).
	Reason  string
	Message string
	// Appeared, Updated and Gone count the events this scan announced.
	Appeared, Updated, Gone int
	// Held names the clusters whose removal waits for an operator after this scan.
	Held []string
	// Known is how many clusters the inventory holds for the source after this scan.
	Known int
}

// Scanner scans sources and keeps their inventory. It is safe for concurrent use; scans of one
// source are serialised. Exactly one scanner process may write a bucket's inventory at a time
// (writes are compare-and-set, so a second writer fails its scans rather than corrupting state).
type Scanner struct {
	kv      jetstream.KeyValue
	pub     Publisher
	cfg     Config
	metrics *Metrics
	log     *slog.Logger

	mu     sync.Mutex
	states map[string]*sourceState
}

// sourceMeta is the per-source record of the inventory (key "sources.<id>").
type sourceMeta struct {
	Source events.SourceRef `json:"source"`
	// Scan counts scans; it numbers SourceDegraded events and held removals.
	Scan uint64 `json:"scan"`
	// DegradedSince is the first scan of the degraded spell the source is in, 0 when it is
	// healthy: SourceRecovered ends the spell (see recovered.go).
	DegradedSince uint64 `json:"degradedSince,omitempty"`
	// Published is the watermark: every event announced by a record write at or below this KV
	// revision was acknowledged by the stream.
	Published uint64 `json:"published"`
	// LastComplete is the time of the last complete listing.
	LastComplete time.Time `json:"lastComplete,omitzero"`
	// Released are the trips an operator released over the bus (RemovalsReleased), until the
	// next complete scan removes what they hold.
	Released []uint64 `json:"released,omitempty"`
	// EarlyReleases are the release annotations read before their trip existed; they release
	// nothing for as long as they stand.
	EarlyReleases []Release `json:"earlyReleases,omitempty"`

	rev uint64
}

// sourceState is the in-memory copy of one source's inventory; the KV bucket is the truth and
// this copy is reloaded from it after any write error.
type sourceState struct {
	mu       sync.Mutex
	meta     sourceMeta
	clusters map[string]*record // by cluster key
	// listed is set once SourceListed was announced for the source (see listed.go).
	listed bool
}

// New returns a scanner over the inventory bucket kv (events.BucketInventory) publishing with pub.
func New(kv jetstream.KeyValue, pub Publisher, cfg Config, metrics *Metrics, logger *slog.Logger) *Scanner {
	return &Scanner{
		kv:      kv,
		pub:     pub,
		cfg:     cfg.withDefaults(),
		metrics: metrics,
		log:     logger,
		states:  make(map[string]*sourceState),
	}
}

// ScanOnce scans one source: it republishes what an interrupted scan left unannounced, lists the
// source, and either publishes SourceDegraded (changing nothing) or announces what changed
// since the inventory's state, applying the grace period and the removal breaker. The error is
// for failures of the scanner itself (NATS, the KV bucket, a cancelled ctx); a degraded source
// is a normal Result.
func (s *Scanner) ScanOnce(ctx context.Context, src Source) (Result, error) {
	res, err := s.scan(ctx, src)
	switch {
	case err != nil:
		s.metrics.Scans.WithLabelValues(src.Ref.Kind, ResultError).Inc()
	case res.Complete:
		s.metrics.Scans.WithLabelValues(src.Ref.Kind, ResultComplete).Inc()
	default:
		s.metrics.Scans.WithLabelValues(src.Ref.Kind, ResultDegraded).Inc()
	}
	return res, err
}

func (s *Scanner) scan(ctx context.Context, src Source) (Result, error) {
	if src.Ref.ID == "" || src.Ref.Kind == "" {
		return Result{}, errors.New("scan: source kind and id are required")
	}
	st, err := s.state(ctx, src.Ref)
	if err != nil {
		return Result{}, err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	// Any failure below leaves the KV bucket as the truth; reload it next time.
	fail := func(err error) (Result, error) {
		s.forget(src.Ref.ID)
		return Result{}, err
	}
	if err := s.recover(ctx, st); err != nil {
		return fail(err)
	}

	st.meta.Source = src.Ref
	released := s.releasedTrips(st, src)
	st.meta.Scan++
	if err := s.putMeta(ctx, st); err != nil {
		return fail(err)
	}
	res := Result{Scan: st.meta.Scan, Known: live(st.clusters)}

	// The listing is diffed page by page as it comes; nothing is written before it is complete.
	d := newDiffer(st.clusters)
	err = s.list(ctx, src, func(page []events.Cluster) error {
		if err := validate(src.Ref, page, d.count); err != nil {
			return err
		}
		if err := s.keepNames(ctx, st, src, page); err != nil {
			return bucketError{err}
		}
		return d.add(page)
	})
	if be := (bucketError{}); errors.As(err, &be) {
		return fail(be.err)
	}
	if err == nil && d.count == 0 && res.Known > 0 {
		err = Degradedf(events.DegradedEmpty, "the source listed no clusters but the inventory holds %d; removing nothing", res.Known)
	}
	if err != nil {
		if ctx.Err() != nil {
			// Shutting down: an interrupted listing says nothing about the source.
			return Result{}, ctx.Err()
		}
		res.Reason, res.Message = ReasonOf(err), messageOf(err)
		if isTimeout(err) {
			res.Message = fmt.Sprintf("listing timed out after %s: %v", s.cfg.ListTimeout, err)
		}
		res.Held = heldNames(st.clusters)
		if err := s.degraded(ctx, st, res.Reason, res.Message, res.Held); err != nil {
			return fail(err)
		}
		s.log.Warn("Source degraded; removing nothing", "source", src.Ref.ID, "kind", src.Ref.Kind,
			"scan", res.Scan, "reason", res.Reason, "message", res.Message)
		s.setGauges(st)
		return res, nil
	}

	res.Complete = true
	if err := s.apply(ctx, st, src, d, released, &res); err != nil {
		return fail(err)
	}
	if len(res.Held) > 0 {
		res.Reason = events.DegradedRemovalsHeld
		res.Message = heldMessage(st, removalCap(res.Known, s.cfg.MaxRemovalFraction), res.Known, s.cfg.OperatorNamespace)
		if err := s.degraded(ctx, st, res.Reason, res.Message, res.Held); err != nil {
			return fail(err)
		}
		s.log.Warn("Removals held by the breaker", "source", src.Ref.ID, "kind", src.Ref.Kind,
			"scan", res.Scan, "held", len(res.Held))
	}
	if err := s.recovered(ctx, st, res); err != nil {
		return fail(err)
	}
	if err := s.announceListed(ctx, st, res); err != nil {
		return fail(err)
	}
	level := slog.LevelDebug
	if res.Appeared+res.Updated+res.Gone > 0 {
		level = slog.LevelInfo
	}
	s.log.Log(ctx, level, "Scanned source", "source", src.Ref.ID, "kind", src.Ref.Kind, "scan", res.Scan,
		"appeared", res.Appeared, "updated", res.Updated, "gone", res.Gone, "known", res.Known)
	s.setGauges(st)
	return res, nil
}

// ReleaseAnnotation is the ClusterRule annotation an operator sets to release held removals:
// its value, "<source id>/<trip>" (ReleaseValue), names one trip, the scan that held them, as
// the RemovalsHeld event (or condition) says, and releases exactly the removals that scan held.
// It is honoured only on rules in the operator namespace, and only once its trip exists, so
// neither a tenant nor a forgotten or guessed value releases a later trip.
const ReleaseAnnotation = "enforcement.globo.com/release-removals"

// bucketError is a failure of the inventory bucket while a page was handled: the scan fails, it
// does not degrade the source.
type bucketError struct{ err error }

func (e bucketError) Error() string { return e.err.Error() }
func (e bucketError) Unwrap() error { return e.err }

// list runs the source's lister under the listing timeout, handing each page to each (the whole
// listing as one page for a Lister that does not page), and records the listing's duration,
// without the time each took.
func (s *Scanner) list(ctx context.Context, src Source, each func([]events.Cluster) error) error {
	lctx, cancel := context.WithTimeout(ctx, s.cfg.ListTimeout)
	defer cancel()
	start := time.Now()
	var handling time.Duration
	timed := func(page []events.Cluster) error {
		t := time.Now()
		defer func() { handling += time.Since(t) }()
		return each(page)
	}
	var err error
	if pl, ok := src.Lister.(PagedLister); ok {
		err = pl.ListPages(lctx, timed)
	} else {
		var listing []events.Cluster
		if listing, err = src.Lister.List(lctx); err == nil {
			err = timed(listing)
		}
	}
	s.metrics.ListingDuration.WithLabelValues(src.Ref.Kind).Observe((time.Since(start) - handling).Seconds())
	if err == nil && lctx.Err() != nil {
		// A lister that returned "successfully" after its deadline may have cut corners.
		err = lctx.Err()
	}
	return err
}

// validate stamps the source on every cluster of a page and rejects a page the diff cannot
// trust; offset is how many clusters the pages before listed.
func validate(ref events.SourceRef, page []events.Cluster, offset int) error {
	for i := range page {
		c := &page[i]
		if c.Key == "" || c.Name == "" {
			return Degradedf(events.DegradedListFailed, "cluster #%d of the listing has no key or name", offset+i)
		}
		// A lister may name a per-cluster credentials Secret (the static source does);
		// otherwise the cluster's credentials are the source's.
		secretNamespace, secretName := ref.SecretNamespace, ref.SecretName
		if c.Source.SecretName != "" {
			secretName = c.Source.SecretName
			if c.Source.SecretNamespace != "" {
				secretNamespace = c.Source.SecretNamespace
			}
		}
		c.Source = ref
		c.Source.SecretNamespace, c.Source.SecretName = secretNamespace, secretName
	}
	return nil
}

// apply turns a complete listing, diffed by listed, into record writes and events (see the package
// comment for the order of writes and publishes).
func (s *Scanner) apply(ctx context.Context, st *sourceState, src Source, listed *differ, released map[uint64]bool, res *Result) error {
	now := s.cfg.Now()
	p := listed.finish(now, s.cfg.GracePeriod)
	d := decideRemovals(st.clusters, p.Due, released, s.cfg.MaxRemovalFraction)
	if d.Tripped {
		s.log.Warn("Removal breaker tripped", "source", src.Ref.ID, "kind", src.Ref.Kind, "scan", st.meta.Scan,
			"due", len(d.Hold), "cap", removalCap(live(st.clusters), s.cfg.MaxRemovalFraction))
	}
	var writes []write
	for _, c := range p.Appeared {
		writes = append(writes, write{key: c.Key, rec: &record{Cluster: c, Event: eventAppeared}})
	}
	for _, u := range p.Updated {
		writes = append(writes, write{key: u.Cluster.Key, rec: &record{Cluster: u.Cluster, Event: eventUpdated, Changed: u.Changed}})
	}
	// Bookkeeping writes announce nothing, so they clear Event: a record above the watermark
	// with an Event is one that still has to reach the stream.
	quiet := func(key string, change func(r *record)) {
		writes = append(writes, write{key: key, change: func(r *record) {
			r.Event, r.Changed = "", nil
			change(r)
		}})
	}
	for _, key := range p.Returned {
		quiet(key, func(r *record) { r.MissingSince, r.LastSeen, r.HeldAt = time.Time{}, time.Time{}, 0 })
	}
	lastSeen := st.meta.LastComplete
	for _, key := range p.Missing {
		quiet(key, func(r *record) { r.MissingSince, r.LastSeen = now, lastSeen })
	}
	scan := st.meta.Scan
	for _, key := range d.Hold {
		quiet(key, func(r *record) { r.HeldAt = scan })
	}
	for _, key := range d.Remove {
		writes = append(writes, write{key: key, change: func(r *record) { r.Event, r.Changed = eventGone, nil }})
	}
	written, err := s.putRecords(ctx, st, writes)
	if err != nil {
		return err
	}
	var evs []events.Event
	for _, r := range written {
		switch r.Event {
		case eventAppeared:
			res.Appeared++
		case eventUpdated:
			res.Updated++
		case eventGone:
			res.Gone++
		default:
			continue
		}
		evs = append(evs, eventFor(r))
	}
	if err := s.publish(ctx, src.Ref.Kind, evs); err != nil {
		return err
	}
	for _, r := range written {
		r.makeSlim()
	}
	st.meta.Published = maxRev(st)
	st.meta.LastComplete = now
	st.meta.Released = stillHeld(st.meta.Released, st.clusters)
	if err := s.putMeta(ctx, st); err != nil {
		return err
	}
	s.dropTombstones(ctx, st)
	res.Known = live(st.clusters)
	res.Held = heldNames(st.clusters)
	return nil
}

// recover republishes the events of record writes above the watermark (an interrupted scan),
// then moves the watermark and drops the tombstones whose gone event is published.
func (s *Scanner) recover(ctx context.Context, st *sourceState) error {
	var pending []*record
	for _, r := range st.clusters {
		if r.Event != "" && r.rev > st.meta.Published {
			pending = append(pending, r)
		}
	}
	if len(pending) > 0 {
		sort.Slice(pending, func(i, j int) bool { return pending[i].rev < pending[j].rev })
		evs := make([]events.Event, 0, len(pending))
		for _, r := range pending {
			evs = append(evs, eventFor(r))
		}
		if err := s.publish(ctx, st.meta.Source.Kind, evs); err != nil {
			return err
		}
		for _, r := range pending {
			r.makeSlim()
		}
		s.log.Info("Republished events of an interrupted scan", "source", st.meta.Source.ID, "events", len(evs))
	}
	if top := maxRev(st); top > st.meta.Published {
		st.meta.Published = top
		if err := s.putMeta(ctx, st); err != nil {
			return err
		}
	}
	s.dropTombstones(ctx, st)
	return nil
}

// publishBatch is how many events one PublishAll call sends at most.
const publishBatch = 1000

// publish sends cluster events, in order, and counts them.
func (s *Scanner) publish(ctx context.Context, kind string, evs []events.Event) error {
	if len(evs) == 0 {
		return nil
	}
	// In batches: nats.go stalls (and PublishAll fails) with more than a few thousand
	// asynchronous publishes outstanding, and the first scan of a large source has one event
	// per cluster.
	for batch := range slices.Chunk(evs, publishBatch) {
		if err := s.pub.PublishAll(ctx, batch); err != nil {
			return fmt.Errorf("publish %d cluster events: %w", len(evs), err)
		}
	}
	for _, e := range evs {
		s.metrics.Events.WithLabelValues(kind, strings.TrimPrefix(eventName(e), "cluster-")).Inc()
	}
	return nil
}

// degraded publishes a SourceDegraded event for the current scan, after marking the source
// record degraded (markDegraded).
func (s *Scanner) degraded(ctx context.Context, st *sourceState, reason, message string, held []string) error {
	if err := s.markDegraded(ctx, st); err != nil {
		return err
	}
	e := &events.SourceDegraded{
		Source:       st.meta.Source,
		Scan:         st.meta.Scan,
		Reason:       reason,
		Message:      message,
		Known:        live(st.clusters),
		HeldRemovals: held,
	}
	if err := s.pub.PublishAll(ctx, []events.Event{e}); err != nil {
		return fmt.Errorf("publish source degraded: %w", err)
	}
	s.metrics.Degraded.WithLabelValues(st.meta.Source.Kind, reason).Inc()
	return nil
}

// dropTombstones deletes the records of clusters whose gone event is published. A failed delete
// is retried on the next scan; the tombstone is harmless meanwhile.
func (s *Scanner) dropTombstones(ctx context.Context, st *sourceState) {
	for key, r := range st.clusters {
		if !r.tombstone() || r.rev > st.meta.Published {
			continue
		}
		err := s.kv.Delete(ctx, clusterKVKey(st.meta.Source.ID, key), jetstream.LastRevision(r.rev))
		if err != nil {
			s.log.Warn("Could not delete inventory tombstone; retrying next scan", "source", st.meta.Source.ID, "error", err)
			continue
		}
		delete(st.clusters, key)
	}
}

func (s *Scanner) setGauges(st *sourceState) {
	ref := st.meta.Source
	s.metrics.ClustersKnown.WithLabelValues(ref.Kind, ref.ID).Set(float64(live(st.clusters)))
	s.metrics.RemovalsHeld.WithLabelValues(ref.Kind, ref.ID).Set(float64(len(heldNames(st.clusters))))
}

// state returns the in-memory inventory of a source, loading it from the bucket on first use.
func (s *Scanner) state(ctx context.Context, ref events.SourceRef) (*sourceState, error) {
	s.mu.Lock()
	st, ok := s.states[ref.ID]
	s.mu.Unlock()
	if ok {
		return st, nil
	}
	st, err := s.load(ctx, ref)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.states[ref.ID]; ok {
		return cur, nil
	}
	s.states[ref.ID] = st
	return st, nil
}

// forget drops a source's in-memory inventory so the next scan reloads it from the bucket.
func (s *Scanner) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.states, id)
}

// load reads a source's records from the bucket.
func (s *Scanner) load(ctx context.Context, ref events.SourceRef) (*sourceState, error) {
	st := &sourceState{meta: sourceMeta{Source: ref}, clusters: make(map[string]*record)}
	entry, err := s.kv.Get(ctx, metaKVKey(ref.ID))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return nil, fmt.Errorf("read inventory of source %s: %w", ref.ID, err)
	default:
		if err := json.Unmarshal(entry.Value(), &st.meta); err != nil {
			return nil, fmt.Errorf("read inventory of source %s: %w", ref.ID, err)
		}
		st.meta.rev = entry.Revision()
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = service.EachEntry(lctx, s.kv, "clusters."+ref.ID+".>", func(e jetstream.KeyValueEntry) error {
		r := &record{}
		if err := json.Unmarshal(e.Value(), r); err != nil {
			return fmt.Errorf("read inventory record %s: %w", e.Key(), err)
		}
		r.rev = e.Revision()
		r.attrHash = hashAttributes(r.Cluster.Attributes)
		if r.Event == "" || r.rev <= st.meta.Published {
			// Announced: only a pending record needs its attributes, to be republished.
			r.makeSlim()
		}
		st.clusters[r.Cluster.Key] = r
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read inventory of source %s: %w", ref.ID, err)
	}
	return st, nil
}

// writeConcurrency bounds the inventory writes of one scan in flight at once. Each write is a
// round trip (and on a replicated bucket a consensus round), so the first scan of a large source
// would otherwise take one round trip per cluster.
const writeConcurrency = 32

// write is one record write of a scan: either a new record (rec, for an appeared or updated
// cluster), or a change applied to the full stored record of a known cluster (change).
type write struct {
	key    string
	rec    *record
	change func(r *record)
}

// putRecords performs a scan's record writes concurrently, each with compare-and-set on the
// revision the scanner last saw (or create-if-absent), and then records the new revisions in
// memory; it returns the written records in the order of writes. A change to a slim record first
// reads the full record back from the bucket. The order of the writes does not matter: nothing is
// published before all of them are stored. On error some writes may have happened; the caller
// drops the in-memory state and reloads it from the bucket.
func (s *Scanner) putRecords(ctx context.Context, st *sourceState, writes []write) ([]*record, error) {
	known := make([]*record, len(writes))
	for i, w := range writes {
		known[i] = st.clusters[w.key]
	}
	out := make([]*record, len(writes))
	errs := make([]error, len(writes))
	Parallel(len(writes), writeConcurrency, func(i int) {
		w := writes[i]
		var prev uint64
		if known[i] != nil {
			prev = known[i].rev
		}
		r := w.rec
		if r != nil {
			r.attrHash = hashAttributes(r.Cluster.Attributes)
		} else {
			full, err := s.fullRecord(ctx, st.meta.Source.ID, known[i])
			if err != nil {
				errs[i] = err
				return
			}
			w.change(full)
			r = full
		}
		errs[i] = s.putRecord(ctx, st.meta.Source.ID, r, prev)
		out[i] = r
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, r := range out {
		st.clusters[r.Cluster.Key] = r
	}
	return out, nil
}

// fullRecord returns a copy of a known record with its attributes, reading a slim record back
// from the bucket. A stored revision other than the one in memory means another writer.
func (s *Scanner) fullRecord(ctx context.Context, sourceID string, known *record) (*record, error) {
	if !known.slim {
		c := *known
		return &c, nil
	}
	key := known.Cluster.Key
	e, err := s.kv.Get(ctx, clusterKVKey(sourceID, key))
	if err != nil {
		return nil, fmt.Errorf("read inventory record of cluster %s: %w", key, err)
	}
	if e.Revision() != known.rev {
		return nil, fmt.Errorf("read inventory record of cluster %s: revision %d, expected %d: another scanner writes this inventory", key, e.Revision(), known.rev)
	}
	full := &record{}
	if err := json.Unmarshal(e.Value(), full); err != nil {
		return nil, fmt.Errorf("read inventory record of cluster %s: %w", key, err)
	}
	full.rev, full.attrHash = known.rev, known.attrHash
	return full, nil
}

// putRecord writes one cluster record: an update of revision prev, or a create when prev is 0.
// It sets r.rev to the new revision.
func (s *Scanner) putRecord(ctx context.Context, sourceID string, r *record, prev uint64) error {
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode inventory record %s: %w", r.Cluster.Key, err)
	}
	kvKey := clusterKVKey(sourceID, r.Cluster.Key)
	var rev uint64
	if prev != 0 {
		rev, err = s.kv.Update(ctx, kvKey, data, prev)
	} else {
		rev, err = s.kv.Create(ctx, kvKey, data)
	}
	if err != nil {
		return fmt.Errorf("write inventory record of cluster %s: %w", r.Cluster.Key, err)
	}
	r.rev = rev
	return nil
}

// putMeta writes the source record with compare-and-set.
func (s *Scanner) putMeta(ctx context.Context, st *sourceState) error {
	data, err := json.Marshal(st.meta)
	if err != nil {
		return fmt.Errorf("encode source record: %w", err)
	}
	key := metaKVKey(st.meta.Source.ID)
	var rev uint64
	if st.meta.rev == 0 {
		rev, err = s.kv.Create(ctx, key, data)
	} else {
		rev, err = s.kv.Update(ctx, key, data, st.meta.rev)
	}
	if err != nil {
		return fmt.Errorf("write source record %s: %w", st.meta.Source.ID, err)
	}
	st.meta.rev = rev
	return nil
}

// eventFor rebuilds the event a record write announced; the same record always yields the same
// event id.
func eventFor(r *record) events.Event {
	switch r.Event {
	case eventAppeared:
		return &events.ClusterAppeared{Cluster: r.Cluster, Revision: r.rev}
	case eventUpdated:
		return &events.ClusterUpdated{Cluster: r.Cluster, Revision: r.rev, Changed: slices.Clone(r.Changed)}
	default:
		return &events.ClusterGone{Source: r.Cluster.Source, Key: r.Cluster.Key, Name: r.Cluster.Name,
			Revision: r.rev, LastSeen: r.LastSeen}
	}
}

// eventName is the id prefix of an event ("cluster-appeared", ...), used as a metric label.
func eventName(e events.Event) string {
	name, _, _ := strings.Cut(e.ID(), ":")
	return name
}

// live counts the clusters a source knows (listed or missing), excluding tombstones.
func live(clusters map[string]*record) int {
	n := 0
	for _, r := range clusters {
		if !r.tombstone() {
			n++
		}
	}
	return n
}

// heldNames lists the names of the clusters whose removal is held, sorted.
func heldNames(clusters map[string]*record) []string {
	var names []string
	for _, r := range clusters {
		if r.HeldAt != 0 && !r.tombstone() {
			names = append(names, r.Cluster.Name)
		}
	}
	sort.Strings(names)
	return names
}

func maxRev(st *sourceState) uint64 {
	top := st.meta.Published
	for _, r := range st.clusters {
		top = max(top, r.rev)
	}
	return top
}

// KV keys: "sources.<id>" and "clusters.<id>.<key>", the cluster key in unpadded base64url
// because KV keys allow only letters, digits and "-_=./" while source keys are free text.
func metaKVKey(id string) string { return "sources." + id }

// keyToken is the last token of a cluster's KV key: the cluster key in unpadded base64url.
func keyToken(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

func clusterKVKey(id, key string) string {
	return "clusters." + id + "." + keyToken(key)
}
