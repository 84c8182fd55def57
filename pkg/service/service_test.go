package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func env(m map[string]string) Getenv { return func(k string) string { return m[k] } }

func TestConfigParsersNameTheVariableInTheirErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(Getenv) error
		val  string
		want string // "" = no error
	}{
		{"duration ok", func(g Getenv) error { _, err := Duration(g, "SCAN_INTERVAL", time.Second); return err }, "45s", ""},
		{"duration bare number", func(g Getenv) error { _, err := Duration(g, "SCAN_INTERVAL", time.Second); return err }, "30", "SCAN_INTERVAL=\"30\": not a duration"},
		{"duration negative", func(g Getenv) error { _, err := Duration(g, "GONE_GRACE_PERIOD", time.Second); return err }, "-1m", "GONE_GRACE_PERIOD=\"-1m\": must not be negative"},
		{"seconds ok", func(g Getenv) error { _, err := Seconds(g, "POLL_INTERVAL_SEC", time.Second, 1); return err }, "30", ""},
		{"seconds zero", func(g Getenv) error { _, err := Seconds(g, "POLL_INTERVAL_SEC", time.Second, 1); return err }, "0", "POLL_INTERVAL_SEC=\"0\""},
		{"seconds text", func(g Getenv) error { _, err := Seconds(g, "STABLE_DURATION_SEC", time.Second, 0); return err }, "2m", "STABLE_DURATION_SEC"},
		{"fraction ok", func(g Getenv) error { _, err := Fraction(g, "MAX_REMOVAL_FRACTION", 0.1); return err }, "0.25", ""},
		{"positive int ok", func(g Getenv) error { _, err := PositiveInt(g, "SYNC_CONCURRENCY", 16); return err }, "4", ""},
		{"positive int zero", func(g Getenv) error { _, err := PositiveInt(g, "SYNC_CONCURRENCY", 16); return err }, "0", "SYNC_CONCURRENCY=\"0\": want a whole number >= 1"},
		{"positive int text", func(g Getenv) error { _, err := PositiveInt(g, "SYNC_CONCURRENCY", 16); return err }, "many", "SYNC_CONCURRENCY=\"many\""},
		{"bytes plain", func(g Getenv) error { return wantBytes(g, 1073741824) }, "1073741824", ""},
		{"bytes GiB", func(g Getenv) error { return wantBytes(g, 10<<30) }, "10GiB", ""},
		{"bytes MB with space", func(g Getenv) error { return wantBytes(g, 500_000_000) }, "500 MB", ""},
		{"bytes unknown unit", func(g Getenv) error { return wantBytes(g, 0) }, "10 parsecs", "STREAM_MAX_BYTES=\"10 parsecs\": want a size"},
		{"bytes zero", func(g Getenv) error { return wantBytes(g, 0) }, "0", "STREAM_MAX_BYTES=\"0\""},
		{"bytes overflow", func(g Getenv) error { return wantBytes(g, 0) }, "9000000000TiB", "STREAM_MAX_BYTES=\"9000000000TiB\""},
		{"replicas ok", func(g Getenv) error { _, err := LoadCommon(g); return err }, "3", ""},
		{"replicas zero", func(g Getenv) error { _, err := LoadCommon(g); return err }, "0", "STREAM_REPLICAS=\"0\": want a whole number >= 1"},
		{"replicas too many", func(g Getenv) error { _, err := LoadCommon(g); return err }, "7", "STREAM_REPLICAS=\"7\": JetStream keeps at most 5"},
		{"fraction too big", func(g Getenv) error { _, err := Fraction(g, "MAX_REMOVAL_FRACTION", 0.1); return err }, "1.5", "MAX_REMOVAL_FRACTION=\"1.5\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.SplitN(tc.want, "=", 2)[0]
			vars := map[string]string{"SCAN_INTERVAL": tc.val, "GONE_GRACE_PERIOD": tc.val, "POLL_INTERVAL_SEC": tc.val, "STABLE_DURATION_SEC": tc.val, "MAX_REMOVAL_FRACTION": tc.val, "SYNC_CONCURRENCY": tc.val, "STREAM_MAX_BYTES": tc.val, "STREAM_REPLICAS": tc.val}
			if strings.HasPrefix(tc.name, "replicas") {
				vars["STREAM_MAX_BYTES"] = ""
			}
			err := tc.run(env(vars))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), name) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// wantBytes parses STREAM_MAX_BYTES and fails unless it is want.
func wantBytes(g Getenv, want int64) error {
	n, err := Bytes(g, "STREAM_MAX_BYTES")
	if err == nil && n != want {
		return fmt.Errorf("STREAM_MAX_BYTES parsed as %d, want %d", n, want)
	}
	return err
}

func TestDefaults(t *testing.T) {
	c, err := LoadCommon(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.NATSURL != DefaultNATSURL || c.MetricsAddr != ":8080" || c.HealthAddr != ":8081" || c.ShutdownTimeout != 30*time.Second ||
		c.StreamReplicas != 1 || c.StreamMaxBytes != 0 {
		t.Fatalf("defaults: %+v", c)
	}
	if d, err := Duration(env(nil), "SCAN_INTERVAL", 30*time.Second); err != nil || d != 30*time.Second {
		t.Fatalf("unset duration: %v %v", d, err)
	}
}

func TestReadyzReportsTheFailingDependency(t *testing.T) {
	h := NewHealth()
	down := errors.New("connection refused")
	h.AddCheck("nats", func(context.Context) error { return nil })
	h.AddCheck("kubernetes", func(context.Context) error { return down })
	srv, err := Listen("127.0.0.1:0", h.Handler(), NewLogger(io.Discard, "test", env(nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Shutdown(context.Background()) }()

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + srv.Addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz %d", code)
	}
	code, body := get("/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "kubernetes: connection refused") || strings.Contains(body, "nats") {
		t.Fatalf("/readyz %d %q", code, body)
	}
	h.AddCheck("kubernetes", func(context.Context) error { return nil })
	if code, _ := get("/readyz"); code != 200 {
		t.Fatalf("/readyz after recovery %d", code)
	}
}

func TestListenFailsOnABusyAddress(t *testing.T) {
	a, err := Listen("127.0.0.1:0", http.NotFoundHandler(), NewLogger(io.Discard, "t", env(nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Shutdown(context.Background()) }()
	if _, err := Listen(a.Addr, http.NotFoundHandler(), NewLogger(io.Discard, "t", env(nil))); err == nil || !strings.Contains(err.Error(), a.Addr) {
		t.Fatalf("second Listen on %s: %v", a.Addr, err)
	}
}

func TestConnectNATSGivesUpWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := ConnectNATS(ctx, "nats://127.0.0.1:1", "test", NewLogger(io.Discard, "t", env(nil)))
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ConnectNATS: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("ConnectNATS did not stop retrying when the context ended")
	}
}

func TestRegistryLints(t *testing.T) {
	problems, err := testutil.GatherAndLint(NewRegistry())
	if err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", err, problems)
	}
}

// Checks may be added while /readyz is being served (a consumer bound after start-up).
func TestAddCheckWhileServing(t *testing.T) {
	h := NewHealth()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 200; i++ {
			_ = h.Ready(context.Background())
		}
	}()
	for i := 0; i < 200; i++ {
		h.AddCheck(fmt.Sprint("c", i%7), func(context.Context) error { return nil })
	}
	<-done
}

// NATS_USER and NATS_PASSWORD go together, never with NATS_CREDS; each mistake names the
// variables, and a user's replies live under its own inbox prefix.
func TestNATSAuthVariables(t *testing.T) {
	for _, tc := range []struct {
		vars map[string]string
		want string // "" = no error
	}{
		{map[string]string{}, ""},
		{map[string]string{"NATS_USER": "rule-engine", "NATS_PASSWORD": "pw"}, ""},
		{map[string]string{"NATS_CREDS": "/creds/user.creds"}, ""},
		{map[string]string{"NATS_USER": "rule-engine"}, "NATS_USER is set but NATS_PASSWORD is empty"},
		{map[string]string{"NATS_PASSWORD": "pw"}, "NATS_PASSWORD is set but NATS_USER is empty"},
		{map[string]string{"NATS_USER": "rule-engine", "NATS_PASSWORD": "pw", "NATS_CREDS": "/c"}, "NATS_USER and NATS_CREDS are both set"},
	} {
		_, err := LoadCommon(env(tc.vars))
		_, cliErr := NATSAuthFromEnv(env(tc.vars))
		for _, err := range []error{err, cliErr} {
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("%v: error %v, want %q", tc.vars, err, tc.want)
			}
		}
	}
	if got := InboxPrefix("policy-watcher-prod-a"); got != "_INBOX.policy-watcher-prod-a" {
		t.Errorf("InboxPrefix = %q", got)
	}
}

// TestProfilesServedOnlyWhereAsked: with PPROF_ADDR the Go runtime's profiles are served there,
// on a listener of their own, and stop with the service; never on the metrics port; without
// PPROF_ADDR nowhere; an address that cannot be bound fails the start naming the variable.
func TestProfilesServedOnlyWhereAsked(t *testing.T) {
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	start := func(vars map[string]string) (*Service, context.CancelFunc, error) {
		m := map[string]string{"HEALTH_ADDR": "127.0.0.1:0", "METRICS_ADDR": "127.0.0.1:0"}
		for k, v := range vars {
			m[k] = v
		}
		ctx, cancel := context.WithCancel(context.Background())
		svc, err := Start(ctx, Options{Name: "pprof-test", Getenv: env(m), Stdout: io.Discard})
		return svc, cancel, err
	}

	svc, stop, err := start(map[string]string{"PPROF_ADDR": "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := svc.PprofAddr()
	if code, body := get("http://" + addr + "/debug/pprof/heap?debug=1"); code != http.StatusOK || !strings.Contains(body, "heap profile") {
		t.Errorf("GET /debug/pprof/heap on PPROF_ADDR = %d %.80q, want the heap profile", code, body)
	}
	if code, _ := get("http://" + svc.MetricsAddr() + "/debug/pprof/heap?debug=1"); code != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/heap on METRICS_ADDR = %d, want 404", code)
	}
	stop()
	if err := svc.Wait(); err != nil {
		t.Fatal(err)
	}
	if code, _ := get("http://" + addr + "/debug/pprof/"); code != 0 {
		t.Errorf("GET /debug/pprof/ after the stop = %d, want no answer", code)
	}

	svc, stop, err = start(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := svc.PprofAddr(); got != "" {
		t.Errorf("PprofAddr without PPROF_ADDR = %q, want none", got)
	}
	if code, _ := get("http://" + svc.MetricsAddr() + "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/ on METRICS_ADDR without PPROF_ADDR = %d, want 404", code)
	}

	// The address is taken: by the metrics server of the service still running.
	_, stop2, err := start(map[string]string{"PPROF_ADDR": svc.MetricsAddr()})
	stop2()
	if err == nil || !strings.Contains(err.Error(), "PPROF_ADDR") {
		t.Errorf("Start with a busy PPROF_ADDR = %v, want an error naming PPROF_ADDR", err)
	}
	stop()
	if err := svc.Wait(); err != nil {
		t.Fatal(err)
	}
}
