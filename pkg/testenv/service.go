package testenv

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// stopTimeout is how long Service.Stop waits for run to return after the cancel.
const stopTimeout = 15 * time.Second

// RunFunc is a service's run as its main calls it, reduced to what a test chooses: the
// environment and where the logs go. A service's test wraps its own run, for example
//
//	func(ctx context.Context, getenv func(string) string, logs io.Writer) error {
//		return run(ctx, getenv, logs, io.Discard)
//	}
type RunFunc func(ctx context.Context, getenv func(string) string, logs io.Writer) error

// Service is one instance of a service under test, started through its run as main would
// start it, in the test's process.
type Service struct {
	// Health and Metrics are the HEALTH_ADDR and METRICS_ADDR the instance was given.
	Health, Metrics string
	// Logs holds everything the instance has logged so far.
	Logs *SyncBuffer

	t       testing.TB
	cancel  context.CancelFunc
	done    chan error
	stopped atomic.Bool
}

// StartService runs run with env plus a free HEALTH_ADDR and METRICS_ADDR (env may set its
// own), until Stop is called or the test ends. It does not wait for readiness: see WaitReady.
// When the test has failed, its end logs what the instance wrote.
func StartService(t testing.TB, run RunFunc, env map[string]string) *Service {
	t.Helper()
	s := &Service{Health: FreeAddr(t), Metrics: FreeAddr(t), Logs: &SyncBuffer{}, t: t, done: make(chan error, 1)}
	full := map[string]string{"HEALTH_ADDR": s.Health, "METRICS_ADDR": s.Metrics}
	for k, v := range env {
		full[k] = v
	}
	s.Health, s.Metrics = full["HEALTH_ADDR"], full["METRICS_ADDR"]
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { s.done <- run(ctx, func(k string) string { return full[k] }, s.Logs) }()
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("logs of the service:\n%s", s.Logs.String())
		}
	})
	return s
}

// WaitReady waits until /readyz answers 200. run returning first, or no 200 within timeout,
// fails the test.
func (s *Service) WaitReady(timeout time.Duration) {
	s.t.Helper()
	Eventually(s.t, timeout, func() error {
		if done, err := s.Exited(); done {
			s.t.Fatalf("run returned before the service was ready: %v", err)
		}
		code, body, err := s.get(s.Health, "/readyz")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("/readyz: %d %s", code, body)
		}
		return nil
	})
}

// get sends a GET for path to addr and returns the status and the body.
func (s *Service) get(addr, path string) (int, string, error) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// Stop cancels the instance and fails the test unless run returns nil within 15 s. Only the
// first call does anything.
func (s *Service) Stop() {
	s.t.Helper()
	if !s.stopped.CompareAndSwap(false, true) {
		return
	}
	s.cancel()
	select {
	case err := <-s.done:
		s.done <- err
		if err != nil {
			s.t.Errorf("run returned %v after cancel, want nil", err)
		}
	case <-time.After(stopTimeout):
		s.t.Errorf("run did not return within %s of cancel", stopTimeout)
	}
}

// Exited reports whether run has returned, with its error.
func (s *Service) Exited() (bool, error) {
	select {
	case err := <-s.done:
		s.done <- err
		return true, err
	default:
		return false, nil
	}
}
