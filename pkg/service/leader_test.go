package service

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

const testLease = "lifecycle-test.enforcement.globo.com"

// leaderEnv is the environment of a replica with leader election on the API server kube.
func leaderEnv(kube *testenv.Kube, ns string, timings ...string) Getenv {
	m := map[string]string{"KUBECONFIG": kube.Kubeconfig, "HEALTH_ADDR": "127.0.0.1:0", "METRICS_ADDR": "127.0.0.1:0",
		"LEADER_ELECTION": "true", "LEADER_ELECTION_NAMESPACE": ns,
		"LEADER_ELECTION_LEASE_DURATION": timings[0], "LEADER_ELECTION_RENEW_DEADLINE": timings[1], "LEADER_ELECTION_RETRY_PERIOD": timings[2]}
	return env(m)
}

// startReplica starts a service that declares a consumer it never binds: /readyz passes only
// while it is standby.
func startReplica(t *testing.T, ctx context.Context, getenv Getenv) (*Service, LeaderElection) {
	t.Helper()
	le, err := LoadLeaderElection(getenv, DefaultOperatorNamespace)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := Start(ctx, Options{Name: "lifecycle-test", Getenv: getenv, Stdout: io.Discard, Kubernetes: true, Consumers: []string{testConsumer}})
	if err != nil {
		t.Fatal(err)
	}
	return svc, le
}

// TestLeadHandsOverAtTheStop runs two replicas: the second waits, ready, while the first leads;
// the first releases the Lease at the end of its stop, so the second leads at once rather than
// after the lease duration.
func TestLeadHandsOverAtTheStop(t *testing.T) {
	kube := testenv.StartKube(t)
	ns := kube.Namespace(t, "lead-handover")
	getenv := leaderEnv(kube, ns, "20s", "10s", "250ms")

	ctxA, stopA := context.WithCancel(context.Background())
	a, le := startReplica(t, ctxA, getenv)
	if err := a.Lead(le, testLease); err != nil {
		t.Fatal(err)
	}
	b, _ := startReplica(t, context.Background(), getenv)
	t.Cleanup(func() { _ = b.Abort(nil) })
	led := make(chan error, 1)
	go func() { led <- b.Lead(le, testLease) }()
	testenv.Eventually(t, 10*time.Second, func() error {
		if code, body := readyz(t, b); code != http.StatusOK {
			return errors.New("standby not ready: " + body)
		}
		return nil
	})
	select {
	case err := <-led:
		t.Fatalf("the second replica leads while the first holds the Lease (err %v)", err)
	case <-time.After(time.Second):
	}

	stopA()
	stopped := time.Now()
	if err := a.Wait(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-led:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(le.LeaseDuration):
		t.Fatalf("the second replica did not lead within the lease duration (%s) of the first one's stop: the Lease was not released", le.LeaseDuration)
	}
	t.Logf("handover after a stop: %s (lease duration %s, retry period %s)", time.Since(stopped).Round(time.Millisecond), le.LeaseDuration, le.RetryPeriod)
	if code, body := readyz(t, b); code == http.StatusOK || !strings.Contains(body, "not bound") {
		t.Errorf("the leader is ready before it bound its consumer: %d %s", code, body)
	}
}

// TestLeadEndsTheServiceWhenLeadershipIsLost: when another holder takes the Lease (the API
// server unreachable for the leader looks the same from the other side), the leader stops with
// ErrLeadershipLost instead of working on beside the new one.
func TestLeadEndsTheServiceWhenLeadershipIsLost(t *testing.T) {
	kube := testenv.StartKube(t)
	ns := kube.Namespace(t, "lead-lost")
	a, le := startReplica(t, context.Background(), leaderEnv(kube, ns, "4s", "2s", "250ms"))
	if err := a.Lead(le, testLease); err != nil {
		t.Fatal(err)
	}
	takeLease(t, kube, ns)
	done := make(chan error, 1)
	go func() { done <- a.Wait() }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrLeadershipLost) {
			t.Fatalf("Wait returned %v, want ErrLeadershipLost", err)
		}
	case <-time.After(30 * time.Second):
		_ = a.Abort(nil)
		t.Fatal("the replica kept working 30s after another holder took its Lease")
	}
}

// takeLease makes another holder take the test Lease for an hour (retried: the leader renews it
// meanwhile).
func takeLease(t *testing.T, kube *testenv.Kube, ns string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var lease coordinationv1.Lease
		if err := kube.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: testLease}, &lease); err != nil {
			return err
		}
		lease.Spec.HolderIdentity = ptr.To("intruder")
		lease.Spec.LeaseDurationSeconds = ptr.To[int32](3600)
		lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		return kube.Client.Update(context.Background(), &lease)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A replica that lost its leadership does not finish the work it holds, as a stop on a signal
// would (TestStopFinishesInFlightWorkAndFlushesItsAck): the next leader may already be handling
// the same keys. Its in-flight handler's context ends at once, the message goes back
// unfinished (neither acknowledged nor dead-lettered), and Wait returns long before
// SHUTDOWN_TIMEOUT.
func TestLostLeadershipAbortsInFlightWork(t *testing.T) {
	kube := testenv.StartKube(t)
	n := testenv.StartNATS(t)
	ns := kube.Namespace(t, "lead-abort")
	getenv := env(map[string]string{"KUBECONFIG": kube.Kubeconfig, "NATS_URL": n.URL(),
		"HEALTH_ADDR": "127.0.0.1:0", "METRICS_ADDR": "127.0.0.1:0", "SHUTDOWN_TIMEOUT": "2m",
		"LEADER_ELECTION": "true", "LEADER_ELECTION_NAMESPACE": ns, "LEADER_ELECTION_LEASE_DURATION": "4s",
		"LEADER_ELECTION_RENEW_DEADLINE": "2s", "LEADER_ELECTION_RETRY_PERIOD": "250ms"})
	le, err := LoadLeaderElection(getenv, DefaultOperatorNamespace)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := Start(context.Background(), Options{Name: "lifecycle-test", Getenv: getenv, Stdout: io.Discard,
		Kubernetes: true, NATS: true, Consumers: []string{testConsumer}})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Lead(le, testLease); err != nil {
		t.Fatal(svc.Abort(err))
	}
	if err := svc.ConnectNATS(); err != nil {
		t.Fatal(svc.Abort(err))
	}
	started, cancelled := make(chan struct{}), make(chan struct{})
	err = svc.Consume(events.ConsumerOptions{Name: testConsumer}, func(hctx context.Context, _ events.Event, _ events.Meta) error {
		close(started)
		<-hctx.Done() // a long write, cut short only by its context
		close(cancelled)
		return hctx.Err()
	})
	if err != nil {
		t.Fatal(svc.Abort(err))
	}
	publishIntent(t, n)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal(svc.Abort(errors.New("handler not called")))
	}

	lost := time.Now()
	takeLease(t, kube, ns)
	done := make(chan error, 1)
	go func() { done <- svc.Wait() }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrLeadershipLost) {
			t.Fatalf("Wait returned %v, want ErrLeadershipLost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the replica kept its handler running 30s after another holder took its Lease (SHUTDOWN_TIMEOUT is 2m)")
	}
	select {
	case <-cancelled:
	default:
		t.Fatal("Wait returned, but the handler's context was never cancelled")
	}
	t.Logf("work aborted and the service stopped %s after the Lease was taken", time.Since(lost).Round(time.Millisecond))
	if info := consumerInfo(t, n); info.AckFloor.Stream != 0 {
		t.Errorf("ack floor %d after the abort, want 0: the message was finished (acknowledged or dead-lettered) instead of left for the next leader", info.AckFloor.Stream)
	}
}

func TestLoadLeaderElection(t *testing.T) {
	le, err := LoadLeaderElection(env(map[string]string{}), "ops")
	if err != nil || le.Enabled || le.Namespace != "ops" || le.LeaseDuration != DefaultLeaseDuration ||
		le.RenewDeadline != DefaultRenewDeadline || le.RetryPeriod != DefaultRetryPeriod {
		t.Fatalf("defaults: %+v, %v", le, err)
	}
	for vars, want := range map[string]string{
		"LEADER_ELECTION=maybe":                                                   "LEADER_ELECTION=\"maybe\"",
		"LEADER_ELECTION_LEASE_DURATION=soon":                                     "LEADER_ELECTION_LEASE_DURATION",
		"LEADER_ELECTION_RETRY_PERIOD=0s":                                         "LEADER_ELECTION_RETRY_PERIOD=\"0s\": must be greater than 0",
		"LEADER_ELECTION_RENEW_DEADLINE=15s":                                      "must be shorter than LEADER_ELECTION_LEASE_DURATION",
		"LEADER_ELECTION_RENEW_DEADLINE=2s":                                       "must be longer than 1.2 × LEADER_ELECTION_RETRY_PERIOD",
		"LEADER_ELECTION_LEASE_DURATION=8s,LEADER_ELECTION_RENEW_DEADLINE=5s,x=y": "",
	} {
		m := map[string]string{}
		for _, kv := range strings.Split(vars, ",") {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		_, err := LoadLeaderElection(env(m), "ops")
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", vars, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: error %v, want one containing %q", vars, err, want)
		}
	}
}
