package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// natsOutage is how long TestNATSOutageIsNotReadyAndLosesNothing keeps NATS down: a minute, long
// enough for every timeout on the way (a publish's 10 s acknowledgement limit, handler retries,
// the scanner's scans) to run out several times; the clients reconnect forever, once a second.
const natsOutage = time.Minute

// TestNATSOutageIsNotReadyAndLosesNothing stops NATS under the running services, changes the
// world while it is down (two more clusters), and starts it again: during the outage every
// service's /readyz answers 503 naming NATS, afterwards every service is ready again without a
// restart, the new clusters get their Applications, every event is stored once and nothing was
// dead-lettered.
func TestNATSOutageIsNotReadyAndLosesNothing(t *testing.T) {
	s := startSystem(t, nil)
	s.createSecret("static", map[string][]byte{"token": []byte("static-token")})
	s.staticRule(staticClusters(3))
	testenv.Eventually(t, 60*time.Second, func() error {
		return equal("Applications", s.names(gvrApplication), []string{"edge-1-agent", "edge-2-agent", "edge-3-agent"})
	})

	s.nats.Shutdown()
	down := time.Now()
	s.setStaticClusters(5)
	for time.Since(down) < natsOutage {
		if time.Since(down) > 3*time.Second { // the clients notice the lost connection first
			for _, name := range hubServices {
				if code, body := s.readyz(name); code != http.StatusServiceUnavailable || !strings.Contains(body, "nats") {
					t.Errorf("%s /readyz %.0fs into the NATS outage: %d %q, want 503 naming nats", name, time.Since(down).Seconds(), code, body)
				}
			}
		}
		time.Sleep(time.Second)
	}
	s.nats.Restart(t)
	back := time.Now()
	testenv.Eventually(t, 30*time.Second, func() error {
		for _, name := range hubServices {
			if code, body := s.readyz(name); code != http.StatusOK {
				return fmt.Errorf("%s /readyz after the outage: %d %q", name, code, body)
			}
		}
		return nil
	})
	t.Logf("every service ready %s after NATS came back from a %s outage", time.Since(back).Round(100*time.Millisecond), natsOutage)
	testenv.Eventually(t, 60*time.Second, func() error {
		return equal("Applications", s.names(gvrApplication),
			[]string{"edge-1-agent", "edge-2-agent", "edge-3-agent", "edge-4-agent", "edge-5-agent"})
	})
	checkNoDuplicates(t, s)
	dls, err := events.ListDeadLetters(context.Background(), s.js, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dls {
		t.Errorf("dead letter of %s: %s: %s", d.Consumer, d.OriginalSubject, d.Reason)
	}
}

// readyz asks a running service's /readyz.
func (s *system) readyz(name string) (int, string) {
	s.t.Helper()
	s.mu.Lock()
	p := s.procs[name]
	s.mu.Unlock()
	resp, err := http.Get("http://" + p.health + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
