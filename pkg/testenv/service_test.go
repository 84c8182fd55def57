package testenv_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// probeRun is a service's run in miniature: it logs its environment, serves /readyz on
// HEALTH_ADDR once ready is closed, and returns runErr when its context is cancelled.
func probeRun(ready <-chan struct{}, runErr error) testenv.RunFunc {
	return func(ctx context.Context, getenv func(string) string, logs io.Writer) error {
		ln, err := net.Listen("tcp", getenv("HEALTH_ADDR"))
		if err != nil {
			return err
		}
		fmt.Fprintf(logs, "Started with COLOUR=%s METRICS_ADDR=%s\n", getenv("COLOUR"), getenv("METRICS_ADDR"))
		mux := http.NewServeMux()
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			select {
			case <-ready:
			default:
				http.Error(w, "not yet", http.StatusServiceUnavailable)
			}
		})
		srv := &http.Server{Handler: mux}
		go func() { _ = srv.Serve(ln) }()
		<-ctx.Done()
		_ = srv.Close()
		return runErr
	}
}

// StartService gives the run its environment and free ports, WaitReady waits for the 200,
// Exited and Stop see run return, and after Stop the instance serves nothing.
func TestStartServiceRunsUntilStop(t *testing.T) {
	ready := make(chan struct{})
	s := testenv.StartService(t, probeRun(ready, nil), map[string]string{"COLOUR": "blue"})
	time.AfterFunc(200*time.Millisecond, func() { close(ready) })
	start := time.Now()
	s.WaitReady(5 * time.Second)
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("WaitReady returned after %s, before /readyz answered 200", d)
	}
	if done, err := s.Exited(); done {
		t.Fatalf("Exited = true (%v) while the service runs", err)
	}
	if want := "COLOUR=blue METRICS_ADDR=" + s.Metrics; !strings.Contains(s.Logs.String(), want) {
		t.Errorf("logs %q do not contain %q", s.Logs.String(), want)
	}
	s.Stop()
	if done, err := s.Exited(); !done || err != nil {
		t.Errorf("after Stop: Exited = %v, %v; want true, nil", done, err)
	}
	if resp, err := http.Get("http://" + s.Health + "/readyz"); err == nil {
		resp.Body.Close()
		t.Error("/readyz still served after Stop")
	}
	s.Stop() // a second call does nothing
}
