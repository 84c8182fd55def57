package service

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func testWindow() (*writeWindow, prometheus.Gauge) {
	limit := prometheus.NewGauge(prometheus.GaugeOpts{Name: "limit"})
	return newWriteWindow(limit, prometheus.NewGauge(prometheus.GaugeOpts{Name: "in_flight"})), limit
}

// fill sends n writes at once; the window must admit them all without waiting.
func fill(t *testing.T, w *writeWindow, n int) []writeTicket {
	t.Helper()
	tickets := make([]writeTicket, n)
	for i := range tickets {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var err error
		tickets[i], err = w.acquire(ctx)
		cancel()
		if err != nil {
			t.Fatalf("write %d of %d waited: window %v, %d in flight", i+1, n, w.limit, w.inFlight)
		}
	}
	return tickets
}

// offer runs writers that each send writes one after another through w to a server that serves
// seats writes at once and answers 429 to any beyond them, until total writes were answered. It
// returns how many were throttled and the widest the window got after its first halving.
func offer(t *testing.T, w *writeWindow, writers, seats, total int) (throttled int, widestAfterHalving int) {
	t.Helper()
	var busy, answered, throttledN atomic.Int64
	var widest atomic.Int64
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for answered.Add(1) <= int64(total) {
				tk, err := w.acquire(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				answer := writeServed
				if busy.Add(1) > int64(seats) {
					answer = writeThrottled
					throttledN.Add(1)
				}
				time.Sleep(200 * time.Microsecond)
				busy.Add(-1)
				w.release(tk, answer)
				w.mu.Lock()
				if w.round > 0 && int64(w.limit) > widest.Load() {
					widest.Store(int64(w.limit))
				}
				w.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return int(throttledN.Load()), int(widest.Load())
}

func TestWriteWindowWidensToTheWorkOffered(t *testing.T) {
	w, gauge := testWindow()
	const writers = 128
	throttled, _ := offer(t, w, writers, 1_000_000, 5_000)
	got := int(testutil.ToFloat64(gauge))
	if throttled != 0 || got < 4*initialWriteWindow || got > writers+1 {
		t.Fatalf("%d writers and a server that serves them all: the window ended at %d (%d throttled), want between %d and %d",
			writers, got, throttled, 4*initialWriteWindow, writers+1)
	}
}

func TestWriteWindowFollowsAThrottlingServer(t *testing.T) {
	const writers, seats, total = 128, 3, 5_000
	w, gauge := testWindow()
	throttled, widest := offer(t, w, writers, seats, total)
	t.Logf("window ended at %v, widest after the first 429 %d; %d of %d writes throttled",
		testutil.ToFloat64(gauge), widest, throttled, total)
	// Additive increase after the first halving climbs a step at a time above the seats; with
	// a fixed bound of 16 most writes would be answered 429.
	if widest > 4*seats {
		t.Errorf("after the first 429 the window grew to %d against a server of %d seats", widest, seats)
	}
	if throttled > total/3 {
		t.Errorf("%d of %d writes were throttled: the window did not follow the server", throttled, total)
	}
}

func TestWriteWindowHalvesOncePerRound(t *testing.T) {
	w, gauge := testWindow()
	// A round in which every write is throttled halves the window once, not once per 429.
	for _, tk := range fill(t, w, initialWriteWindow) {
		w.release(tk, writeThrottled)
	}
	if got := testutil.ToFloat64(gauge); got != initialWriteWindow/2 {
		t.Fatalf("after a round of 429s the window is %v, want %d", got, initialWriteWindow/2)
	}
}

func TestWriteWindowNeverClosesAndDoesNotGrowUnused(t *testing.T) {
	w, gauge := testWindow()
	for range 10 { // every round throttled: 16, 8, 4, 2, 1, 1, ...
		for _, tk := range fill(t, w, int(w.limit)) {
			w.release(tk, writeThrottled)
		}
	}
	if got := testutil.ToFloat64(gauge); got != 1 {
		t.Fatalf("after ten throttled rounds the window is %v, want 1", got)
	}
	// One write at a time into a window of 4 never fills it: the window stays.
	w.limit = 4
	for range 100 {
		w.release(fill(t, w, 1)[0], writeServed)
	}
	if got := testutil.ToFloat64(gauge); got != 4 {
		t.Fatalf("after 100 writes one at a time the window is %v, want 4: it grew without being used", got)
	}
}

func TestWriteWindowQueuesAndGivesUpWithTheContext(t *testing.T) {
	w, _ := testWindow()
	held := fill(t, w, initialWriteWindow)

	// A write beyond the window waits until one ends.
	admitted := make(chan writeTicket)
	go func() {
		tk, err := w.acquire(context.Background())
		if err != nil {
			t.Error(err)
		}
		admitted <- tk
	}()
	select {
	case <-admitted:
		t.Fatal("a write beyond a full window was sent at once")
	case <-time.After(50 * time.Millisecond):
	}
	w.release(held[0], writeServed)
	select {
	case tk := <-admitted:
		held[0] = tk
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting write was not admitted when one ended")
	}

	// A write whose request is cancelled while it waits fails with the context's error and
	// takes no place. (The write that waited widened the window by one: fill it again.)
	held = append(held, fill(t, w, int(w.limit)-w.inFlight)...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := w.acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire with an ended context: %v, want DeadlineExceeded", err)
	}
	for _, tk := range held {
		w.release(tk, writeServed)
	}
	if w.inFlight != 0 || len(w.waiting) != 0 {
		t.Fatalf("after every write ended: %d in flight, %d waiting", w.inFlight, len(w.waiting))
	}
}

func TestWriteWindowTakesWritesButNotLeases(t *testing.T) {
	for _, c := range []struct {
		method, path string
		want         bool
	}{
		{http.MethodPost, "/api/v1/namespaces/argocd/secrets", true},
		{http.MethodPatch, "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/a", true},
		{http.MethodPut, "/apis/enforcement.globo.com/v1beta1/namespaces/e/clusterrules/r/status", true},
		{http.MethodDelete, "/apis/argoproj.io/v1alpha1/namespaces/argocd/appprojects/p", true},
		{http.MethodGet, "/api/v1/namespaces/argocd/secrets/s", false},
		{http.MethodGet, "/apis/argoproj.io/v1alpha1/applications?watch=true", false},
		{http.MethodPut, "/apis/coordination.k8s.io/v1/namespaces/e/leases/argo-syncer.enforcement.globo.com", false},
		{http.MethodPost, "/apis/coordination.k8s.io/v1/namespaces/e/leases", false},
		{http.MethodPut, "/k8s/clusters/local/apis/coordination.k8s.io/v1/namespaces/e/leases/l", false},
	} {
		r := httptest.NewRequest(c.method, c.path, nil)
		if got := inWindow(r); got != c.want {
			t.Errorf("%s %s in the window: %v, want %v", c.method, c.path, got, c.want)
		}
	}
}

func TestWriteWindowLearnsNothingFromFailures(t *testing.T) {
	for _, c := range []struct {
		status int
		err    error
		want   writeAnswer
	}{
		{http.StatusOK, nil, writeServed},
		{http.StatusConflict, nil, writeServed}, // the server took the write and refused it
		{http.StatusTooManyRequests, nil, writeThrottled},
		{http.StatusServiceUnavailable, nil, writeFailed},
		{0, errors.New("connection reset"), writeFailed},
	} {
		var resp *http.Response
		if c.err == nil {
			resp = &http.Response{StatusCode: c.status}
		}
		if got := answerOf(resp, c.err); got != c.want {
			t.Errorf("answer of %d, %v: %v, want %v", c.status, c.err, got, c.want)
		}
	}
	// A full window whose writes fail neither widens nor halves.
	w, gauge := testWindow()
	for _, tk := range fill(t, w, initialWriteWindow) {
		w.release(tk, writeFailed)
	}
	if got := testutil.ToFloat64(gauge); got != initialWriteWindow {
		t.Fatalf("after a full round of failed writes the window is %v, want %d", got, initialWriteWindow)
	}
}
