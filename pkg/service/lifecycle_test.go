package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// testConsumer is a consumer of the default topology whose filter takes uninstall intents.
const testConsumer = events.ConsumerArgoSyncer

func lifecycleEnv(natsURL string, extra map[string]string) Getenv {
	m := map[string]string{"NATS_URL": natsURL, "HEALTH_ADDR": "127.0.0.1:0", "METRICS_ADDR": "127.0.0.1:0"}
	for k, v := range extra {
		m[k] = v
	}
	return env(m)
}

// publishIntent publishes one uninstall intent through a connection of its own.
func publishIntent(t *testing.T, n *testenv.NATS) {
	t.Helper()
	js := n.JetStream(t)
	ev := &events.UninstallIntent{
		Rule: events.RuleRef{Namespace: "team-a", Name: "r", UID: "u", Generation: 1},
		Cluster: events.Target{Name: "c1", Key: "c1", URL: "https://c1",
			Source: events.SourceRef{Kind: "static", ID: "0123456789abcdef"}, Revision: 1},
		Enforcement: "guestbook", Reason: events.UninstallNoLongerMatches,
	}
	if _, err := events.NewPublisher(js, "/enforcement/test").Publish(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
}

// consumerInfo reads the consumer's state on the server through a connection of its own.
func consumerInfo(t *testing.T, n *testenv.NATS) *jetstream.ConsumerInfo {
	t.Helper()
	js := n.JetStream(t)
	c, err := js.Consumer(context.Background(), events.StreamName, testConsumer)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func readyz(t *testing.T, svc *Service) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + svc.HealthAddr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// startConsuming starts a service with one consumer whose handler is h and waits for it to be
// bound.
func startConsuming(t *testing.T, ctx context.Context, getenv Getenv, logs io.Writer, h events.Handler) *Service {
	t.Helper()
	svc, err := Start(ctx, Options{Name: "lifecycle-test", Getenv: getenv, Stdout: logs, NATS: true, Consumers: []string{testConsumer}})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := readyz(t, svc); code != http.StatusServiceUnavailable || !strings.Contains(body, "nats: not connected yet") ||
		!strings.Contains(body, "consumer "+testConsumer+" not bound") {
		t.Errorf("/readyz before NATS: %d %q, want 503 naming nats and the consumer", code, body)
	}
	if err := svc.ConnectNATS(); err != nil {
		t.Fatal(svc.Abort(err))
	}
	if code, body := readyz(t, svc); code != http.StatusServiceUnavailable || !strings.Contains(body, "not bound") || strings.Contains(body, "nats") {
		t.Errorf("/readyz connected, consumer not bound: %d %q", code, body)
	}
	if err := svc.Consume(events.ConsumerOptions{Name: testConsumer}, h); err != nil {
		t.Fatal(svc.Abort(err))
	}
	if code, body := readyz(t, svc); code != http.StatusOK {
		t.Errorf("/readyz with the consumer bound: %d %q, want 200", code, body)
	}
	return svc
}

// A handler in flight at the stop signal finishes, and its ack is on the server when Wait
// returns: the connection was drained and closed, not merely asked to drain. A worker is
// stopped only after the consumer, so the handler still finds it.
func TestStopFinishesInFlightWorkAndFlushesItsAck(t *testing.T) {
	n := testenv.StartNATS(t)
	logs := &testenv.SyncBuffer{}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	started := make(chan struct{})
	var workerStopped, handlerSawWorkerStopped bool
	var mu sync.Mutex
	svc := startConsuming(t, ctx, lifecycleEnv(n.URL(), nil), logs, func(hctx context.Context, _ events.Event, _ events.Meta) error {
		close(started)
		time.Sleep(500 * time.Millisecond) // still working when the signal comes
		mu.Lock()
		handlerSawWorkerStopped = workerStopped
		mu.Unlock()
		return hctx.Err() // the handler's context survives the signal
	})
	svc.Go("worker", func(wctx context.Context) error {
		<-wctx.Done()
		mu.Lock()
		workerStopped = true
		mu.Unlock()
		return nil
	})

	publishIntent(t, n)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("handler not called")
	}
	stop()
	waitDone := make(chan error, 1)
	go func() { waitDone <- svc.Wait() }()
	time.Sleep(100 * time.Millisecond)
	if code, _ := readyz(t, svc); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while stopping: %d, want 503", code)
	}
	if err := <-waitDone; err != nil {
		t.Fatalf("Wait: %v\n%s", err, logs)
	}

	// No waiting here: the ack must already be on the server.
	info := consumerInfo(t, n)
	if info.NumAckPending != 0 || info.AckFloor.Stream != 1 || info.NumRedelivered != 0 {
		t.Errorf("after Wait: ack pending %d, ack floor %d, redelivered %d; want the message acked",
			info.NumAckPending, info.AckFloor.Stream, info.NumRedelivered)
	}
	mu.Lock()
	if handlerSawWorkerStopped {
		t.Error("the worker stopped before the in-flight handler finished")
	}
	mu.Unlock()
	out := logs.String()
	if i, j := strings.Index(out, `"msg":"Stopping"`), strings.Index(out, `"msg":"Stopped"`); i < 0 || j < i {
		t.Errorf("logs lack Stopping then Stopped:\n%s", out)
	}
	if strings.Contains(out, "Disconnected from NATS") {
		t.Errorf("the stop's own drain is logged as a disconnect:\n%s", out)
	}
	if resp, err := http.Get("http://" + svc.HealthAddr() + "/healthz"); err == nil {
		resp.Body.Close()
		t.Error("health server still answers after Wait")
	}
}

// A handler that does not finish is cut short by SHUTDOWN_TIMEOUT: Wait returns soon after it,
// naming the consumer, and the message stays unacknowledged for the next instance.
func TestShutdownTimeoutBoundsAStuckHandler(t *testing.T) {
	n := testenv.StartNATS(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{})
	svc := startConsuming(t, ctx, lifecycleEnv(n.URL(), map[string]string{"SHUTDOWN_TIMEOUT": "700ms"}), io.Discard,
		func(context.Context, events.Event, events.Meta) error {
			close(started)
			<-release
			return nil
		})
	publishIntent(t, n)
	<-started
	stop()
	begin := time.Now()
	err := svc.Wait()
	if took := time.Since(begin); took > 3*time.Second {
		t.Errorf("Wait took %s with SHUTDOWN_TIMEOUT=700ms", took)
	}
	if err == nil || !strings.Contains(err.Error(), "stop consumer "+testConsumer) || !strings.Contains(err.Error(), "SHUTDOWN_TIMEOUT") {
		t.Errorf("Wait: %v, want the consumer's stop named with SHUTDOWN_TIMEOUT", err)
	}
	if info := consumerInfo(t, n); info.NumAckPending != 1 {
		t.Errorf("ack pending %d, want the stuck message left unacknowledged", info.NumAckPending)
	}
}

// A worker that fails ends the service: Wait returns its error without a signal.
func TestFailingWorkerEndsWait(t *testing.T) {
	n := testenv.StartNATS(t)
	logs := &testenv.SyncBuffer{}
	svc, err := Start(context.Background(), Options{Name: "lifecycle-test", Getenv: lifecycleEnv(n.URL(), nil), Stdout: logs, NATS: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.ConnectNATS(); err != nil {
		t.Fatal(svc.Abort(err))
	}
	boom := errors.New("cache sync failed")
	svc.Go("informers", func(context.Context) error { return boom })
	svc.Go("quiet", func(ctx context.Context) error { <-ctx.Done(); return nil })
	done := make(chan error, 1)
	go func() { done <- svc.Wait() }()
	select {
	case err := <-done:
		if !errors.Is(err, boom) || !strings.Contains(err.Error(), "informers") {
			t.Errorf("Wait: %v, want the worker's error naming it", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after the worker failed")
	}
	if !svc.NATS.IsClosed() {
		t.Error("NATS connection not closed")
	}
	if !strings.Contains(logs.String(), `"reason":"informers: cache sync failed"`) {
		t.Errorf("Stopping does not give the reason:\n%s", logs)
	}
}

// A stop signal while the service still waits for NATS is a normal stop: Abort returns nil.
func TestAbortDuringStartUpOnSignalIsNil(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	svc, err := Start(ctx, Options{Name: "lifecycle-test", Getenv: lifecycleEnv("nats://127.0.0.1:1", nil), Stdout: io.Discard, NATS: true})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(300*time.Millisecond, stop)
	err = svc.ConnectNATS()
	if err == nil {
		t.Fatal("ConnectNATS succeeded against a closed port")
	}
	if err := svc.Abort(err); err != nil {
		t.Errorf("Abort after the signal: %v, want nil", err)
	}
	// Without a signal, Abort returns the start-up error.
	svc, err = Start(context.Background(), Options{Name: "lifecycle-test", Getenv: lifecycleEnv("nats://127.0.0.1:1", nil), Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	bad := fmt.Errorf("open bucket x: %w", errors.New("not found"))
	if err := svc.Abort(bad); !errors.Is(err, bad) {
		t.Errorf("Abort: %v, want %v", err, bad)
	}
}

// A standby service (waiting for leadership) is ready although its consumer is not bound.
func TestStandbyIsReady(t *testing.T) {
	svc, err := Start(context.Background(), Options{Name: "lifecycle-test", Getenv: lifecycleEnv("nats://127.0.0.1:1", nil),
		Stdout: io.Discard, Consumers: []string{"c"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Abort(nil) }()
	if code, _ := readyz(t, svc); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz unbound: %d", code)
	}
	svc.SetStandby(true)
	if code, body := readyz(t, svc); code != http.StatusOK {
		t.Errorf("/readyz standby: %d %q", code, body)
	}
}

func TestStartRejectsABadShutdownTimeout(t *testing.T) {
	for _, v := range []string{"30", "-5s", "0s"} {
		_, err := Start(context.Background(), Options{Name: "t", Stdout: io.Discard,
			Getenv: lifecycleEnv("", map[string]string{"SHUTDOWN_TIMEOUT": v})})
		if err == nil || !strings.Contains(err.Error(), "SHUTDOWN_TIMEOUT") || !strings.Contains(err.Error(), v) {
			t.Errorf("SHUTDOWN_TIMEOUT=%s: %v, want an error naming the variable and the value", v, err)
		}
	}
}

// ConnectNATS applies the topology with STREAM_MAX_BYTES and STREAM_REPLICAS: the new stream
// gets the cap, and replicas a single server cannot keep are a start-up error that says so.
func TestConnectNATSAppliesTheStreamConfiguration(t *testing.T) {
	n := testenv.StartNATS(t)
	connect := func(extra map[string]string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		svc, err := Start(ctx, Options{Name: "topology-test", Getenv: lifecycleEnv(n.URL(), extra), Stdout: io.Discard, NATS: true})
		if err != nil {
			t.Fatal(err)
		}
		return svc.Abort(svc.ConnectNATS())
	}
	if err := connect(map[string]string{"STREAM_MAX_BYTES": "64MiB"}); err != nil {
		t.Fatal(err)
	}
	s, err := n.JetStream(t).Stream(context.Background(), events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxBytes; got != 64<<20 {
		t.Errorf("stream MaxBytes %d, want STREAM_MAX_BYTES=64MiB", got)
	}
	if err := connect(map[string]string{"STREAM_REPLICAS": "3"}); err == nil || !strings.Contains(err.Error(), "apply topology") ||
		!strings.Contains(err.Error(), "replicas") {
		t.Errorf("STREAM_REPLICAS=3 on a single server: %v, want the topology refused for its replicas", err)
	}
}

// A bucket deleted while the services run is recreated by the topology check, and the
// service's handle writes to it again. Before, it stayed missing until the next restart and
// every write of its owner failed.
func TestLostBucketIsRecreatedWhileRunning(t *testing.T) {
	topologyCheckInterval = 100 * time.Millisecond
	t.Cleanup(func() { topologyCheckInterval = 30 * time.Second })
	n := testenv.StartNATS(t)
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := Start(ctx, Options{Name: "topology-test", Getenv: lifecycleEnv(n.URL(), nil), Stdout: io.Discard, NATS: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.ConnectNATS(); err != nil {
		t.Fatal(svc.Abort(err))
	}
	defer func() {
		cancel()
		if err := svc.Wait(); err != nil {
			t.Error(err)
		}
	}()
	kv, err := svc.JetStream.KeyValue(ctx, events.BucketInventory)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.JetStream(t).DeleteKeyValue(ctx, events.BucketInventory); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		_, err := kv.Put(ctx, "k", []byte("v"))
		return err
	})
	if e, err := kv.Get(ctx, "k"); err != nil || e.Revision() != 1 {
		t.Fatalf("recreated bucket: %v, revision %v; want the value at revision 1", err, e)
	}
}
