package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Defaults of the leader election timings. A replica killed without a goodbye is replaced
// after at most LeaseDuration + 2.2 × RetryPeriod (client-go jitters the attempts to take the
// Lease by up to 1.2 × RetryPeriod): 14.4 s, plus the new leader's start-up, within the
// 20 s a handover may take. client-go's customary 15 s lease would allow 19.4 s. A replica
// that stops on SIGTERM releases the Lease and the other takes it within that retry.
// RenewDeadline leaves 3 s between a leader giving up and another one taking over.
const (
	DefaultLeaseDuration = 10 * time.Second
	DefaultRenewDeadline = 7 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// ErrLeadershipLost ends a service whose replica could not renew its Lease in time: another
// replica may take over, so this one must stop working at once.
var ErrLeadershipLost = errors.New("leader election lost: the Lease was not renewed in time")

// LeaderElection is how the replicas of one service decide which of them works: the one that
// holds a coordination.k8s.io Lease. The others wait, ready, consuming and writing nothing,
// and take over when the leader goes.
type LeaderElection struct {
	// Enabled (LEADER_ELECTION, default false) turns the election on. Off, the service works
	// at once and must run as a single replica.
	Enabled bool
	// Namespace (LEADER_ELECTION_NAMESPACE, default OPERATOR_NAMESPACE) holds the Lease.
	Namespace string
	// LeaseDuration (LEADER_ELECTION_LEASE_DURATION, default 10s) is how long the others wait
	// after the last renewal before they take the Lease.
	LeaseDuration time.Duration
	// RenewDeadline (LEADER_ELECTION_RENEW_DEADLINE, default 7s) is how long the leader keeps
	// trying to renew before it gives up and stops; shorter than LeaseDuration, so that it
	// stops before another replica may take over.
	RenewDeadline time.Duration
	// RetryPeriod (LEADER_ELECTION_RETRY_PERIOD, default 2s) is the time between two attempts
	// to take or renew the Lease.
	RetryPeriod time.Duration
}

// LoadLeaderElection reads LEADER_ELECTION, LEADER_ELECTION_NAMESPACE (default
// operatorNamespace) and the three timings. Errors name the variable; timings that client-go
// would refuse (RenewDeadline not below LeaseDuration, RetryPeriod × 1.2 not below
// RenewDeadline) are errors too.
func LoadLeaderElection(getenv Getenv, operatorNamespace string) (LeaderElection, error) {
	le := LeaderElection{Namespace: String(getenv, "LEADER_ELECTION_NAMESPACE", operatorNamespace)}
	var errs []error
	switch v := strings.ToLower(getenv("LEADER_ELECTION")); v {
	case "", "false", "0":
	case "true", "1":
		le.Enabled = true
	default:
		errs = append(errs, fmt.Errorf("LEADER_ELECTION=%q: want true or false", v))
	}
	timing := func(dst *time.Duration, name string, def time.Duration) {
		d, err := Duration(getenv, name, def)
		switch {
		case err != nil:
			errs = append(errs, err)
		case d == 0:
			errs = append(errs, fmt.Errorf("%s=%q: must be greater than 0", name, getenv(name)))
		}
		*dst = d
	}
	timing(&le.LeaseDuration, "LEADER_ELECTION_LEASE_DURATION", DefaultLeaseDuration)
	timing(&le.RenewDeadline, "LEADER_ELECTION_RENEW_DEADLINE", DefaultRenewDeadline)
	timing(&le.RetryPeriod, "LEADER_ELECTION_RETRY_PERIOD", DefaultRetryPeriod)
	if len(errs) == 0 {
		if le.RenewDeadline >= le.LeaseDuration {
			errs = append(errs, fmt.Errorf("LEADER_ELECTION_RENEW_DEADLINE=%s: must be shorter than LEADER_ELECTION_LEASE_DURATION=%s", le.RenewDeadline, le.LeaseDuration))
		}
		if float64(le.RenewDeadline) <= leaderelection.JitterFactor*float64(le.RetryPeriod) {
			errs = append(errs, fmt.Errorf("LEADER_ELECTION_RENEW_DEADLINE=%s: must be longer than %.1f × LEADER_ELECTION_RETRY_PERIOD=%s", le.RenewDeadline, leaderelection.JitterFactor, le.RetryPeriod))
		}
	}
	return le, errors.Join(errs...)
}

// Lead blocks until this replica holds the Lease named lease in le.Namespace, and returns nil
// then; with le.Enabled false it returns nil at once. While it waits the service is standby
// (ready; see SetStandby): call it after the steps that only read or connect, and before the
// first one that consumes or writes. It returns the Context's error when the service is asked
// to stop first.
//
// Once leading, the replica renews the Lease in the background. If a renewal fails for
// RenewDeadline, the service ends with ErrLeadershipLost (its stop begins at once, so that it
// stops working before another replica may take over). The stop releases the Lease as its last
// step but the HTTP servers', after the consumers, workers and the NATS drain have finished, so
// that the next leader starts from everything this one acknowledged and wrote. It needs
// Options.Kubernetes and may be called once.
func (s *Service) Lead(le LeaderElection, lease string) error {
	if !le.Enabled {
		return nil
	}
	if s.Kube == nil {
		return errors.New("leader election: the service has no Kubernetes configuration (Options.Kubernetes)")
	}
	cs, err := kubernetes.NewForConfig(s.Kube)
	if err != nil {
		return fmt.Errorf("leader election: kubernetes client: %w", err)
	}
	host, _ := os.Hostname() // the pod name in a cluster
	identity := host + "_" + string(uuid.NewUUID())
	elected := make(chan struct{})
	// The elector runs on a context of its own, cancelled by the stop's release step: the
	// Lease is kept until the work is finished, then released (ReleaseOnCancel).
	leCtx, cancel := context.WithCancel(context.WithoutCancel(s.ctx))
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: lease, Namespace: le.Namespace},
			Client:     cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		},
		LeaseDuration:   le.LeaseDuration,
		RenewDeadline:   le.RenewDeadline,
		RetryPeriod:     le.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            lease,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { close(elected) },
			OnStoppedLeading: func() {
				if leCtx.Err() == nil { // not the release at the stop
					s.abortWork()
					s.failWith(ErrLeadershipLost)
				}
			},
		},
	})
	if err != nil {
		cancel()
		return fmt.Errorf("leader election: %w", err)
	}
	done := make(chan struct{})
	s.mu.Lock()
	s.releaseLease = func(ctx context.Context) error {
		cancel()
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("release Lease %s/%s: not released within SHUTDOWN_TIMEOUT %s", le.Namespace, lease, s.Common.ShutdownTimeout)
		}
	}
	s.mu.Unlock()

	s.SetStandby(true)
	s.Logger.Info("Waiting for leadership", "lease", lease, "namespace", le.Namespace, "identity", identity)
	started := time.Now()
	go func() { defer close(done); elector.Run(leCtx) }()
	select {
	case <-elected:
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
	s.SetStandby(false)
	s.Logger.Info("Leading", "lease", lease, "namespace", le.Namespace, "identity", identity,
		"waited", time.Since(started).Round(time.Millisecond).String())
	return nil
}
