package scanner_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/pkg/testenv/rancherfake"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/rancher"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner/scannertest"
)

// harness is one scanner over real embedded NATS (stream, KV bucket) and a fake Rancher.
type harness struct {
	t       *testing.T
	nats    *testenv.NATS
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	stream  *eventstest.Reader
	clock   *scannertest.Clock
	cfg     scanner.Config
	sc      *scanner.Scanner
	reg     *prometheus.Registry
	metrics *scanner.Metrics
	rancher *rancherfake.Server
	src     scanner.Source
}

const grace = 10 * time.Minute

func newHarness(t *testing.T, pageSize int) *harness {
	t.Helper()
	h := &harness{t: t, nats: testenv.StartNATS(t), clock: scannertest.NewClock()}
	h.cfg = scanner.Config{GracePeriod: grace, MaxRemovalFraction: 0.1, ListTimeout: 10 * time.Second, Now: h.clock.Now}
	h.connect()
	h.rancher = rancherfake.New(t, "tok-3a9c", pageSize)
	creds, err := events.ParseRancherSecret(map[string][]byte{"url": []byte(h.rancher.URL), "token": []byte(h.rancher.Token), "caCert": h.rancher.CACertPEM()})
	if err != nil {
		t.Fatal(err)
	}
	ref := events.SourceRef{Kind: events.SourceKindRancher, SecretNamespace: "enforcement", SecretName: "rancher"}
	ref.ID = events.SourceID(ref.Kind, ref.SecretNamespace, ref.SecretName, nil)
	h.src = scanner.Source{Ref: ref, Lister: &rancher.Lister{Creds: creds}}
	return h
}

// connect opens a new NATS connection and a new Scanner over the same bucket: what a restarted
// process does. The scanner's memory starts empty; the test's reading of the stream goes on
// where it was.
func (h *harness) connect() {
	h.t.Helper()
	_, h.js = eventstest.Bus(h.t, h.nats.URL())
	var err error
	if h.kv, err = h.js.KeyValue(context.Background(), events.BucketInventory); err != nil {
		h.t.Fatal(err)
	}
	if h.stream == nil {
		h.stream = eventstest.NewReader(h.t, h.js)
	} else {
		h.stream.Reopen(h.t, h.js)
	}
	h.restart(events.NewPublisher(h.js, "/enforcement/source-scanner"))
}

// restart replaces the scanner (fresh memory) with one publishing through pub.
func (h *harness) restart(pub scanner.Publisher) {
	h.reg = prometheus.NewRegistry()
	h.metrics = scanner.NewMetrics(h.reg)
	h.sc = scanner.New(h.kv, pub, h.cfg, h.metrics, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// listTimeout restarts the scanner with another listing timeout (short for the tests of hanging
// sources; long otherwise, so that a loaded machine does not time listings out).
func (h *harness) listTimeout(d time.Duration) {
	h.cfg.ListTimeout = d
	h.restart(events.NewPublisher(h.js, "/enforcement/source-scanner"))
}

func (h *harness) scan() scanner.Result {
	h.t.Helper()
	res, err := h.sc.ScanOnce(context.Background(), h.src)
	if err != nil {
		h.t.Fatalf("scan: %v", err)
	}
	return res
}

// events returns the events stored in the stream since the last call.
func (h *harness) events() []events.Event {
	h.t.Helper()
	return h.stream.New(h.t)
}

// summary renders events compactly ("appeared c-1", "gone c-2", "degraded ListFailed").
func summary(evs []events.Event) []string {
	var out []string
	for _, e := range evs {
		switch e := e.(type) {
		case *events.ClusterAppeared:
			out = append(out, "appeared "+e.Cluster.Key)
		case *events.ClusterUpdated:
			out = append(out, "updated "+e.Cluster.Key+" "+strings.Join(e.Changed, ","))
		case *events.ClusterGone:
			out = append(out, "gone "+e.Key)
		case *events.SourceDegraded:
			out = append(out, "degraded "+e.Reason)
		}
	}
	sort.Strings(out)
	return out
}

func (h *harness) expect(want ...string) []events.Event {
	h.t.Helper()
	evs := h.events()
	got := summary(evs)
	sort.Strings(want)
	if len(want) == 0 {
		want = nil
	}
	if !reflect.DeepEqual(got, want) {
		h.t.Fatalf("events = %q, want %q", got, want)
	}
	return evs
}

func clusters(n int) []map[string]any {
	out := make([]map[string]any, n)
	for i := range out {
		out[i] = rancherfake.Cluster(fmt.Sprintf("c-%d", i), fmt.Sprintf("cluster-%d", i), "active", map[string]string{"env": "prod"})
	}
	return out
}

// newAnnounced returns a harness whose Rancher holds clusters(n) and whose first scan announced
// them all, and those clusters.
func newAnnounced(t *testing.T, pageSize, n int) (*harness, []map[string]any) {
	t.Helper()
	h := newHarness(t, pageSize)
	cs := clusters(n)
	h.rancher.SetClusters(cs...)
	h.scan()
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("appeared c-%d", i)
	}
	h.expect(want...)
	return h, cs
}

func TestAppearedUpdatedGone(t *testing.T) {
	h := newHarness(t, 2)
	cs := clusters(3)
	h.rancher.SetClusters(cs...)

	res := h.scan()
	evs := h.expect("appeared c-0", "appeared c-1", "appeared c-2")
	if !res.Complete || res.Appeared != 3 || res.Known != 3 {
		t.Fatalf("result = %+v", res)
	}
	a := evs[0].(*events.ClusterAppeared)
	if a.Revision == 0 || a.Cluster.Source != h.src.Ref || !a.Cluster.Eligible || a.Cluster.Attributes["provider"] != "rke" {
		t.Fatalf("appeared = %+v", a)
	}

	// A scan with nothing new announces nothing, although volatile fields changed.
	h.scan()
	h.expect()

	cs[0] = rancherfake.Cluster("c-0", "cluster-0", "active", map[string]string{"env": "staging"})
	cs[1] = rancherfake.Cluster("c-1", "cluster-1", "provisioning", map[string]string{"env": "prod"})
	h.rancher.SetClusters(cs...)
	h.scan()
	// Labels and state are top-level fields of the Rancher object, so attributes changed too.
	evs = h.expect("updated c-0 labels,attributes", "updated c-1 state,eligible,attributes")
	for _, e := range evs {
		if u := e.(*events.ClusterUpdated); u.Cluster.Key == "c-1" && u.Cluster.Eligible {
			t.Fatalf("provisioning cluster announced eligible")
		}
	}

	// c-2 disappears: missing for less than the grace period is nothing.
	h.rancher.SetClusters(cs[0], cs[1])
	h.scan()
	h.clock.Add(grace - time.Second)
	h.scan()
	h.expect()
	h.clock.Add(time.Second)
	res = h.scan()
	evs = h.expect("gone c-2")
	g := evs[0].(*events.ClusterGone)
	if g.Name != "cluster-2" || g.LastSeen.IsZero() || res.Known != 2 {
		t.Fatalf("gone = %+v, result %+v", g, res)
	}

	// It comes back: a new appearance, with a new revision (so a new event id).
	h.rancher.SetClusters(cs...)
	h.scan()
	evs = h.expect("appeared c-2")
	if r := evs[0].(*events.ClusterAppeared).Revision; r <= a.Revision || r <= g.Revision {
		t.Fatalf("re-appearance revision %d not above %d/%d", r, a.Revision, g.Revision)
	}
}

func TestReturningWithinGraceIsNotGone(t *testing.T) {
	h, cs := newAnnounced(t, 10, 2)
	h.rancher.SetClusters(cs[0])
	h.scan()
	h.clock.Add(grace / 2)
	h.rancher.SetClusters(cs...)
	h.scan()
	// The absence clock restarts: another half grace of absence is not enough.
	h.rancher.SetClusters(cs[0])
	h.scan()
	h.clock.Add(grace/2 + time.Minute)
	h.scan()
	h.expect()
}

// TestDegradedRemovesNothing breaks the source in every way design.md names while two clusters
// are really gone and the grace period has long passed: each scan is degraded and nothing is
// removed. When the source heals, the absence clock starts at the first complete listing.
func TestDegradedRemovesNothing(t *testing.T) {
	cases := []struct {
		name   string
		break_ func(h *harness)
		reason string
	}{
		{"401", func(h *harness) { h.rancher.Token = "rotated" }, events.DegradedUnauthorized},
		{"500", func(h *harness) { h.rancher.FailPage(1, 500) }, events.DegradedListFailed},
		{"503 on page 2", func(h *harness) { h.rancher.FailPage(2, 503) }, events.DegradedPartial},
		{"garbage", func(h *harness) { h.rancher.BreakPage(1, rancherfake.FailGarbage) }, events.DegradedListFailed},
		{"partial", func(h *harness) { h.rancher.BreakPage(1, rancherfake.FailPartial) }, events.DegradedPartial},
		{"timeout", func(h *harness) { h.rancher.BreakPage(1, rancherfake.FailHang); h.listTimeout(300 * time.Millisecond) }, events.DegradedListFailed},
		{"timeout on page 2", func(h *harness) { h.rancher.BreakPage(2, rancherfake.FailHang); h.listTimeout(time.Second) }, events.DegradedPartial},
		{"empty", func(h *harness) { h.rancher.SetClusters() }, events.DegradedEmpty},
		{"secret invalid", func(h *harness) {
			h.src.Lister = scanner.ListerFunc(func(context.Context) ([]events.Cluster, error) {
				return nil, scanner.Degradedf(events.DegradedSecretInvalid, "Secret enforcement/rancher not found")
			})
		}, events.DegradedSecretInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 10)
			cs := clusters(20) // two pages; the breaker allows 2 removals per scan
			h.rancher.SetClusters(cs...)
			if res := h.scan(); res.Appeared != 20 {
				t.Fatalf("first scan: %+v", res)
			}
			h.events()
			good := h.src.Lister

			h.rancher.SetClusters(cs[:18]...) // c-18 and c-19 are really gone...
			tc.break_(h)                      // ...but the source cannot be trusted.
			for range 3 {
				h.clock.Add(grace)
				res := h.scan()
				if res.Complete || res.Reason != tc.reason || res.Known != 20 {
					t.Fatalf("result = %+v, want degraded %s with 20 known", res, tc.reason)
				}
			}
			evs := h.expect("degraded "+tc.reason, "degraded "+tc.reason, "degraded "+tc.reason)
			if d := evs[0].(*events.SourceDegraded); d.Known != 20 || d.Scan == 0 || strings.Contains(d.Message, "tok-3a9c") {
				t.Fatalf("degraded = %+v", d)
			}
			if got := testutil.ToFloat64(h.metrics.Degraded.WithLabelValues(events.SourceKindRancher, tc.reason)); got != 3 {
				t.Fatalf("degraded metric = %g, want 3", got)
			}

			// Healed: the first complete listing starts the absence clock.
			h.rancher.Heal()
			h.listTimeout(10 * time.Second)
			h.rancher.Token = "tok-3a9c"
			h.rancher.SetClusters(cs[:18]...)
			h.src.Lister = good
			h.scan()
			h.expect()
			h.clock.Add(grace)
			h.scan()
			h.expect("gone c-18", "gone c-19")
		})
	}
}

func TestBreakerHoldsRemovalsUntilReleased(t *testing.T) {
	h := newHarness(t, 100)
	cs := clusters(20) // cap: max(1, 0.1 × 20) = 2 removals per scan
	h.rancher.SetClusters(cs...)
	h.scan()
	h.events()

	h.rancher.SetClusters(cs[5:]...) // five vanish at once
	h.scan()
	h.clock.Add(grace)
	res := h.scan()
	evs := h.expect("degraded RemovalsHeld")
	d := evs[0].(*events.SourceDegraded)
	want := []string{"cluster-0", "cluster-1", "cluster-2", "cluster-3", "cluster-4"}
	if !reflect.DeepEqual(d.HeldRemovals, want) || !res.Complete || res.Gone != 0 {
		t.Fatalf("degraded = %+v, result %+v", d, res)
	}
	// The message names the trip and both ways to release it.
	for _, want := range []string{
		fmt.Sprintf("trip %d holds 5 (cluster-0, cluster-1, cluster-2 and 2 more)", res.Scan),
		fmt.Sprintf("ClusterRule in namespace enforcement that uses this source with %s=%s", scanner.ReleaseAnnotation, scanner.ReleaseValue(h.src.Ref.ID, res.Scan)),
		fmt.Sprintf("enforcement release-removals %s %d", h.src.Ref.ID, res.Scan),
	} {
		if !strings.Contains(d.Message, want) {
			t.Fatalf("message %q does not say %q", d.Message, want)
		}
	}
	if got := testutil.ToFloat64(h.metrics.RemovalsHeld.WithLabelValues(events.SourceKindRancher, h.src.Ref.ID)); got != 5 {
		t.Fatalf("removals held gauge = %g", got)
	}
	tripScan := res.Scan

	// Still held on later scans, and reported every time.
	h.clock.Add(time.Hour)
	h.scan()
	h.expect("degraded RemovalsHeld")

	// One of them comes back: it is no longer held.
	h.rancher.SetClusters(append([]map[string]any{cs[0]}, cs[5:]...)...)
	h.scan()
	evs = h.expect("degraded RemovalsHeld")
	if got := evs[0].(*events.SourceDegraded).HeldRemovals; len(got) != 4 {
		t.Fatalf("held after a return = %v", got)
	}

	// The operator releases the trip: the four are gone.
	h.src.Releases = []scanner.Release{{Rule: "enforcement/ops", Trip: tripScan}}
	res = h.scan()
	h.expect("gone c-1", "gone c-2", "gone c-3", "gone c-4")
	if res.Gone != 4 || len(res.Held) != 0 || res.Known != 16 {
		t.Fatalf("after release: %+v", res)
	}

	// A forgotten release annotation does not release a later trip.
	h.rancher.SetClusters(cs[10:]...) // 6 more of 16 vanish; cap is 1
	h.scan()
	h.clock.Add(grace)
	h.scan()
	h.expect("degraded RemovalsHeld")
	h.scan()
	h.expect("degraded RemovalsHeld")
}

// trip makes the clusters keep vanish from the listing (clusters not in keep and not gone
// already), waits out the grace period and returns the scan whose breaker held them: the trip.
func (h *harness) trip(keep []map[string]any, wantHeld int) uint64 {
	h.t.Helper()
	h.rancher.SetClusters(keep...)
	h.scan()
	h.events() // RemovalsHeld of an earlier trip, if any
	h.clock.Add(grace)
	res := h.scan()
	evs := h.expect("degraded RemovalsHeld")
	if len(res.Held) != wantHeld || evs[0].(*events.SourceDegraded).Scan != res.Scan {
		h.t.Fatalf("trip: %+v, want %d held", res, wantHeld)
	}
	return res.Scan
}

// scanGone scans once and returns the clusters announced gone (sorted keys); a scan that still
// holds removals publishes RemovalsHeld too, which this ignores.
func (h *harness) scanGone() []string {
	h.t.Helper()
	h.scan()
	var gone []string
	for _, e := range h.events() {
		if g, ok := e.(*events.ClusterGone); ok {
			gone = append(gone, g.Key)
		}
	}
	sort.Strings(gone)
	return gone
}

func keys(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("c-%d", i))
	}
	sort.Strings(out)
	return out
}

// TestReleaseNamesOneTrip: a release names one trip (the scan that held the removals) and
// releases exactly what that trip holds. A release naming a later scan releases nothing, neither
// now nor when that scan trips later (an annotation cannot pre-release a trip); a release over
// the bus (Scanner.Release, what the removals released event does) of a trip that holds nothing
// is refused; another trip stays held after one is released.
func TestReleaseNamesOneTrip(t *testing.T) {
	h := newHarness(t, 100)
	cs := clusters(20) // cap: 2 of 20
	h.rancher.SetClusters(cs...)
	h.scan()
	h.events()
	ctx := context.Background()
	ops := func(trip uint64) []scanner.Release { return []scanner.Release{{Rule: "enforcement/ops", Trip: trip}} }

	n := h.trip(cs[5:], 5)   // trip N holds c-0..c-4
	m := h.trip(cs[10:], 10) // trip M holds c-5..c-9 (N's stay held)

	// A release naming N+5, a later scan, releases nothing.
	h.src.Releases = ops(n + 5)
	if gone := h.scanGone(); gone != nil {
		t.Fatalf("release of trip %d (N+5) removed %v", n+5, gone)
	}
	// Nor does a release over the bus of a trip that holds nothing.
	for _, trip := range []uint64{n + 1, n + 5, m + 100} {
		if err := h.sc.Release(ctx, h.src.Ref, trip); !errors.Is(err, scanner.ErrNotHeld) {
			t.Fatalf("Release(trip %d) = %v, want ErrNotHeld", trip, err)
		}
	}
	// The annotation naming N releases exactly N's clusters; M's stay held.
	h.src.Releases = ops(n)
	if gone := h.scanGone(); !reflect.DeepEqual(gone, keys(0, 5)) {
		t.Fatalf("release of trip N: gone %v, want %v", gone, keys(0, 5))
	}
	h.clock.Add(time.Hour)
	if gone := h.scanGone(); gone != nil {
		t.Fatalf("after N's release: gone %v; trip M must stay held", gone)
	}
	if res := h.scan(); len(res.Held) != 5 || res.Reason != events.DegradedRemovalsHeld {
		t.Fatalf("after N's release: %+v, want M's 5 held", res)
	}
	h.events()

	// Released over the bus, trip M goes; N's release is spent (N holds nothing now).
	if err := h.sc.Release(ctx, h.src.Ref, n); !errors.Is(err, scanner.ErrNotHeld) {
		t.Fatalf("Release(trip N) again = %v, want ErrNotHeld", err)
	}
	if err := h.sc.Release(ctx, h.src.Ref, m); err != nil {
		t.Fatal(err)
	}
	// A restarted scanner finds the release in the inventory.
	h.restart(events.NewPublisher(h.js, "/enforcement/source-scanner"))
	if gone := h.scanGone(); !reflect.DeepEqual(gone, keys(5, 10)) {
		t.Fatalf("release of trip M: gone %v, want %v", gone, keys(5, 10))
	}

	// An annotation that names the next trip before it happens releases nothing when it does.
	last := h.scan().Scan
	h.src.Releases = ops(last + 3)
	h.rancher.SetClusters(cs[13:]...) // 3 of 10 vanish; the cap is 1
	h.scan()                          // last+1: missing
	h.scan()                          // last+2
	h.clock.Add(grace)
	if res := h.scan(); res.Scan != last+3 || len(res.Held) != 3 {
		t.Fatalf("want trip %d holding 3: %+v", last+3, res)
	}
	h.events()
	if gone := h.scanGone(); gone != nil {
		t.Fatalf("an annotation set before its trip released %v", gone)
	}
	// Removed for a scan and set again, it releases the trip.
	h.src.Releases = nil
	h.scanGone()
	h.src.Releases = ops(last + 3)
	if gone := h.scanGone(); !reflect.DeepEqual(gone, keys(10, 13)) {
		t.Fatalf("annotation set again: gone %v, want %v", gone, keys(10, 13))
	}
}

func TestRestartDoesNotReannounce(t *testing.T) {
	h, cs := newAnnounced(t, 2, 3)
	h.rancher.SetClusters(cs[0], cs[1])
	before := h.scan() // c-2 missing since now

	// The process and the NATS server restart; the inventory is in the KV bucket's file store.
	h.nats.Restart(t)
	h.connect()
	res := h.scan()
	h.expect()
	if res.Known != 3 {
		t.Fatalf("known after restart = %d", res.Known)
	}
	// Scan numbers keep counting, so source degraded ids (source, scan, reason) stay unique.
	if res.Scan != before.Scan+1 {
		t.Fatalf("scan after restart = %d, want %d", res.Scan, before.Scan+1)
	}
	// The absence clock survived the restart too.
	h.clock.Add(grace)
	h.scan()
	h.expect("gone c-2")
}

// failingPublisher loses every publish after the first `ok` batches, like a crash between the
// KV writes and the stream's acknowledgement. With publishFirst it publishes and then fails, like
// a crash after the acknowledgement but before the watermark moved.
type failingPublisher struct {
	inner        scanner.Publisher
	publishFirst bool
}

func (p *failingPublisher) PublishAll(ctx context.Context, evs []events.Event) error {
	if p.publishFirst {
		if err := p.inner.PublishAll(ctx, evs); err != nil {
			return err
		}
	}
	return errors.New("connection lost")
}

func TestCrashBetweenInventoryAndStream(t *testing.T) {
	for _, publishFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("published=%t", publishFirst), func(t *testing.T) {
			h := newHarness(t, 10)
			good := events.NewPublisher(h.js, "/enforcement/source-scanner")
			h.rancher.SetClusters(clusters(3)...)
			h.restart(&failingPublisher{inner: good, publishFirst: publishFirst})
			if _, err := h.sc.ScanOnce(context.Background(), h.src); err == nil {
				t.Fatal("scan with a failing publisher succeeded")
			}
			if publishFirst {
				h.expect("appeared c-0", "appeared c-1", "appeared c-2")
			} else {
				h.expect()
			}
			// The restarted process republishes what the inventory says was not acknowledged;
			// the stream drops what it already has.
			h.restart(good)
			h.scan()
			if publishFirst {
				h.expect()
			} else {
				h.expect("appeared c-0", "appeared c-1", "appeared c-2")
			}
			h.scan()
			h.expect()
		})
	}
}

func TestMetricsLint(t *testing.T) {
	h := newHarness(t, 10)
	h.rancher.SetClusters(clusters(2)...)
	h.scan()
	problems, err := testutil.GatherAndLint(h.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
	if got := testutil.ToFloat64(h.metrics.ClustersKnown.WithLabelValues(events.SourceKindRancher, h.src.Ref.ID)); got != 2 {
		t.Fatalf("clusters known = %g", got)
	}
	if got := testutil.ToFloat64(h.metrics.Scans.WithLabelValues(events.SourceKindRancher, scanner.ResultComplete)); got != 1 {
		t.Fatalf("scans = %g", got)
	}
}

// TestSecondWriterFailsInsteadOfCorrupting runs two scanners on one bucket: the one with a stale
// memory fails its scan on the compare-and-set, reloads, and then announces nothing twice.
func TestSecondWriterFailsInsteadOfCorrupting(t *testing.T) {
	h, cs := newAnnounced(t, 10, 3)
	first := h.sc
	h.restart(events.NewPublisher(h.js, "/enforcement/source-scanner"))
	h.scan() // the second scanner loads the inventory
	h.expect()

	cs[0] = rancherfake.Cluster("c-0", "renamed-0", "active", map[string]string{"env": "prod"})
	h.rancher.SetClusters(cs...)
	h.scan()
	h.expect("updated c-0 name,attributes")

	// The first scanner still remembers the old c-0 and tries to announce the same change.
	if _, err := first.ScanOnce(context.Background(), h.src); err == nil {
		t.Fatal("a scanner with a stale inventory wrote over a newer record")
	}
	h.expect()
	if res, err := first.ScanOnce(context.Background(), h.src); err != nil || res.Updated != 0 {
		t.Fatalf("after reload: %+v, %v", res, err)
	}
	h.expect()
}

// TestPerClusterSecret checks that a lister's per-cluster credentials Secret (the static
// source's secretName) travels in the cluster's SourceRef, under the source's id, and that
// changing it is an update.
func TestPerClusterSecret(t *testing.T) {
	h := newHarness(t, 10)
	secret := "edge-creds"
	h.src.Lister = scanner.ListerFunc(func(context.Context) ([]events.Cluster, error) {
		return []events.Cluster{
			{Source: events.SourceRef{SecretName: secret}, Key: "edge", Name: "edge", URL: "https://edge"},
			{Key: "plain", Name: "plain", URL: "https://plain"},
		}, nil
	})
	h.scan()
	for _, e := range h.expect("appeared edge", "appeared plain") {
		a, ok := e.(*events.ClusterAppeared)
		if !ok {
			continue // the source's first SourceListed
		}
		c := a.Cluster
		want := h.src.Ref
		if c.Key == "edge" {
			want.SecretName = "edge-creds"
		}
		if c.Source != want {
			t.Errorf("%s: source %+v, want %+v", c.Key, c.Source, want)
		}
	}
	secret = "edge-creds-2"
	h.scan()
	h.expect("updated edge secret")
}

// TestPageAfterChangesFails: the listing is diffed page by page, but it is still all or nothing.
// Page 1 holds a new cluster and a relabelled one, page 2 fails: the scan announces neither and
// writes nothing, and the next complete listing announces both, once.
func TestPageAfterChangesFails(t *testing.T) {
	h, cs := newAnnounced(t, 10, 20)
	cs[3] = rancherfake.Cluster("c-3", "cluster-3", "active", map[string]string{"env": "staging"})
	fleet := append([]map[string]any{rancherfake.Cluster("c-new", "cluster-new", "active", nil)}, cs...)
	h.rancher.SetClusters(fleet...)
	h.rancher.FailPage(2, 503)
	if res := h.scan(); res.Complete || res.Reason != events.DegradedPartial || res.Appeared+res.Updated != 0 {
		t.Fatalf("result = %+v, want degraded %s announcing nothing", res, events.DegradedPartial)
	}
	h.expect("degraded " + events.DegradedPartial)

	// A restarted scanner reads the inventory from the bucket: nothing of page 1 was written.
	h.connect()
	h.rancher.Heal()
	if res := h.scan(); !res.Complete || res.Appeared != 1 || res.Updated != 1 || res.Known != 21 {
		t.Fatalf("result = %+v, want 1 appeared and 1 updated of 21", res)
	}
	h.expect("appeared c-new", "updated c-3 labels,attributes")
	h.scan()
	h.expect()
}

// TestKeyListedOnTwoPages: a cluster key on page 1 and again on page 2 makes the listing
// untrustworthy, as on one page: the scan is degraded and announces nothing.
func TestKeyListedOnTwoPages(t *testing.T) {
	h, cs := newAnnounced(t, 10, 12)
	twice := append(append([]map[string]any{}, cs...), rancherfake.Cluster("c-2", "cluster-2b", "active", nil))
	h.rancher.SetClusters(twice...)
	res := h.scan()
	if res.Complete || res.Reason != events.DegradedListFailed || !strings.Contains(res.Message, `cluster key "c-2" is listed twice`) {
		t.Fatalf("result = %+v, want degraded %s naming c-2", res, events.DegradedListFailed)
	}
	h.expect("degraded " + events.DegradedListFailed)
}
