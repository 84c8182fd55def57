package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// On a NATS server with the shipped authorization (deploy/nats), the operator's commands
// connect as the user NATS_USER names: refused without it, and with the operator's user they
// read what a hub service's user may not (every consumer's dead letters), publish what no
// service may (a release of held removals) and create a managed cluster's claim writer
// consumer.
func TestOperatorCommandsConnectAsTheirUser(t *testing.T) {
	srv := testenv.StartNATS(t, testenv.WithAuthorization(t, testenv.ShippedAuthorization(t)))
	const operator = "enforcement-operator"
	js := srv.JetStream(t, nats.UserInfo(operator, testenv.NATSPassword(operator)))
	if err := events.DefaultTopology(events.TopologyOptions{}).Apply(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	cli := func(env map[string]string, args ...string) (string, error) {
		env["NATS_URL"] = srv.URL()
		var out bytes.Buffer
		err := run(t.Context(), args, func(k string) string { return env[k] }, &out, &out)
		return out.String(), err
	}

	if _, err := cli(map[string]string{}, "dead-letters"); err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
		t.Errorf("dead-letters without a user: %v, want the server's refusal", err)
	}
	if _, err := cli(map[string]string{"NATS_USER": operator}, "dead-letters"); err == nil || !strings.Contains(err.Error(), "NATS_PASSWORD") {
		t.Errorf("dead-letters with a user and no password: %v, want an error naming NATS_PASSWORD", err)
	}
	asOperator := map[string]string{"NATS_USER": operator, "NATS_PASSWORD": testenv.NATSPassword(operator)}
	if out, err := cli(asOperator, "dead-letters"); err != nil {
		t.Errorf("dead-letters as the operator: %v\n%s", err, out)
	}
	if out, err := cli(asOperator, "release-removals"); err != nil {
		t.Errorf("release-removals as the operator: %v\n%s", err, out)
	}
	out, err := cli(asOperator, "claim-writer", "prod-a")
	if err != nil || !strings.Contains(out, "Created consumer claim-writer-prod-a on stream ENFORCEMENT (filter enforcement.compliance.changed.prod-a)") {
		t.Errorf("claim-writer prod-a as the operator: %v\n%s", err, out)
	}
	if _, err := js.Consumer(t.Context(), events.StreamName, "claim-writer-prod-a"); err != nil {
		t.Errorf("claim writer consumer of prod-a: %v", err)
	}
	asScanner := map[string]string{"NATS_USER": "source-scanner", "NATS_PASSWORD": testenv.NATSPassword("source-scanner")}
	if _, err := cli(asScanner, "dead-letters"); err == nil {
		t.Error("dead-letters as source-scanner's user: allowed, want refused (it may not read the stream)")
	}
}
