package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// TestEveryServiceWithItsOwnNATSUser: on a NATS server with the authorization the repository
// ships (deploy/nats), the four hub services, each connected as its own user with its own
// subject permissions, carry a rule with both triggers from discovery to its Applications, and
// remove them when the rule is deleted; no service is refused a subject on the way (its log
// would say "Permissions Violation").
func TestEveryServiceWithItsOwnNATSUser(t *testing.T) {
	// The webhook receiver listens on loopback, which trigger-dispatcher refuses unless opened.
	s := startSystemWithUsers(t, map[string]string{"TRIGGER_ALLOWED_NETWORKS": "127.0.0.0/8"})
	var mu sync.Mutex
	hooks := map[string]int{}
	webhook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hooks[r.URL.Path]++
		mu.Unlock()
	}))
	t.Cleanup(webhook.Close)

	s.createSecret("static", map[string][]byte{"token": []byte("static-token")})
	s.staticRule(`
- name: edge-1
  url: https://edge-1.example:6443
- name: edge-2
  url: https://edge-2.example:6443
`, fmt.Sprintf(`  triggers:
    beforeInstall:
      endpoint: %[1]s/before
    afterInstall:
      endpoint: %[1]s/after
`, webhook.URL))

	apps := []string{"edge-1-agent", "edge-2-agent"}
	testenv.Eventually(t, 90*time.Second, func() error {
		if err := s.holds(apps, []string{"edge-1", "edge-2"}, []string{"edge-1", "edge-2"}); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if hooks["/before"] < 2 || hooks["/after"] < 2 {
			return fmt.Errorf("webhooks called %v, want /before and /after twice each", hooks)
		}
		return nil
	})
	s.deleteRule(operatorNS, "edge")
	testenv.Eventually(t, 60*time.Second, func() error { return s.holds(nil, nil, nil) })

	// Each service published under its own user: the stream holds every step.
	seen := map[string]bool{}
	for _, e := range s.audit() {
		seen[e.Type()] = true
	}
	for _, want := range []events.Event{&events.ClusterAppeared{}, &events.InstallIntent{}, &events.InstallGated{},
		&events.TriggerDelivered{}, &events.InstallSucceeded{}, &events.UninstallIntent{}, &events.UninstallDone{}} {
		if !seen[want.Type()] {
			t.Errorf("no %s in the stream", want.Type())
		}
	}
	for _, name := range hubServices {
		log, err := os.ReadFile(filepath.Join(s.logs, name+".log"))
		if err != nil || !strings.Contains(string(log), `"msg":"Connected to NATS"`) {
			t.Errorf("%s's log: %v, want it to have connected", name, err)
		}
		for _, line := range strings.Split(string(log), "\n") {
			if strings.Contains(line, "Permissions Violation") {
				t.Errorf("%s was refused a subject: %s", name, line)
			}
		}
	}
}
