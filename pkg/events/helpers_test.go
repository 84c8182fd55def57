package events

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startNATS runs a real nats-server with JetStream on a temp dir, in-process. (pkg/testenv has
// the same for other modules; this package keeps its test dependencies to NATS alone.)
func startNATS(t testing.TB, storeDir string) *server.Server {
	t.Helper()
	if storeDir == "" {
		storeDir = t.TempDir()
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: storeDir, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(s.Shutdown)
	return s
}

// connect returns a JetStream client on s, connected with natsOpts, with the topology applied.
func connect(t testing.TB, s *server.Server, opts TopologyOptions, natsOpts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), natsOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := DefaultTopology(opts).Apply(ctx, js); err != nil {
		t.Fatal(err)
	}
	return nc, js
}

var testSource = SourceRef{Kind: "rancher", ID: "0123456789abcdef", SecretNamespace: "enforcement", SecretName: "rancher"}
var testRule = RuleRef{Namespace: "team-a", Name: "dev.rule", UID: "uid-1", Generation: 3}

// sampleEvents has one valid event of every type in the catalog.
func sampleEvents() []Event {
	cluster := Cluster{Source: testSource, Key: "c-abc12", Name: "prod.eu-1", URL: "https://rancher.example/k8s/clusters/c-abc12",
		Labels: map[string]string{"env": "prod"}, State: "active", Eligible: true, Attributes: map[string]any{"driver": "gke"}}
	target := Target{Name: "prod.eu-1", Key: "c-abc12", URL: cluster.URL, Source: testSource, Revision: 7}
	since := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	return []Event{
		&ClusterAppeared{Cluster: cluster, Revision: 7},
		&ClusterUpdated{Cluster: cluster, Revision: 8, Changed: []string{"labels"}},
		&ClusterGone{Source: testSource, Key: "c-abc12", Name: "prod.eu-1", Revision: 9, LastSeen: since},
		&SourceDegraded{Source: testSource, Scan: 12, Reason: DegradedListFailed, Message: "503 Service Unavailable", Known: 4},
		&SourceRecovered{Source: testSource, Scan: 13, DegradedSince: 12, Known: 4},
		&SourceListed{Source: testSource, Scan: 14, Known: 4},
		&RuleRemovalsReleased{Rule: testRule, Clusters: []string{"prod.eu-1"}, By: "ops@laptop"},
		&RolloutApproved{Rule: testRule, Step: "canary", By: "ops@laptop"},
		&RolloutProgressed{Rule: testRule, StableGeneration: 2, Step: "canary", Phase: RolloutStepStarted, Clusters: []string{"prod.eu-1"}},
		&InstallIntent{Rule: testRule, Cluster: target, SpecHash: "a1b2c3", DeletionPolicy: DeletionOrphan,
			Enforcement: Enforcement{Name: "guestbook", Repo: "https://github.com/argoproj/argocd-example-apps", Path: "guestbook", Namespace: "default",
				HelmParameters: []HelmParameter{{Name: "replicaCount", Value: "1"}}},
			Triggers: &Triggers{BeforeInstall: &Trigger{Endpoint: "http://hooks/before", TimeoutSeconds: 5, FailurePolicy: "Ignore"}}},
		&UninstallIntent{Rule: testRule, Cluster: target, Enforcement: "guestbook", Reason: UninstallNoLongerMatches, DeletionPolicy: DeletionOrphan},
		&InstallSucceeded{IntentID: "install:x", Rule: testRule, Cluster: "prod.eu-1", Enforcement: "guestbook", Application: "prod-eu-1-guestbook-1a2b3c4d", Created: true, SpecHash: "a1b2c3"},
		&InstallGated{IntentID: "install:x", IntentSequence: 5, Application: "prod-eu-1-guestbook-1a2b3c4d",
			Intent: InstallIntent{Rule: testRule, Cluster: target, SpecHash: "a1b2c3",
				Enforcement: Enforcement{Name: "guestbook", Repo: "https://github.com/argoproj/argocd-example-apps", Path: "guestbook", Namespace: "default"},
				Triggers:    &Triggers{BeforeInstall: &Trigger{Endpoint: "http://hooks/before", TimeoutSeconds: 5, FailurePolicy: "Fail"}}}},
		&InstallFailed{IntentID: "install:x", Rule: testRule, Cluster: "prod.eu-1", Enforcement: "guestbook", Reason: "Invalid", Message: "spec.source.repoURL: Required value", Permanent: true},
		&UninstallDone{IntentID: "uninstall:x", Rule: testRule, Cluster: "prod.eu-1", Enforcement: "guestbook", Application: "a", Deleted: true},
		&ApplicationHealth{Rule: testRule, Cluster: "prod.eu-1", Enforcement: "guestbook", Application: "prod-eu-1-guestbook-1a2b3c4d",
			SpecHash: "a1b2c3", ResourceVersion: "4711", Health: HealthDegraded, Sync: SyncSynced, Operation: "Succeeded", Message: "Deployment guestbook exceeded its progress deadline"},
		&TriggerDelivered{DeliveryID: "d1", IntentID: "install:x", IntentSequence: 5, Phase: PhaseBeforeInstall, Rule: testRule, Cluster: "prod.eu-1", Enforcement: "guestbook", StatusCode: 200, Attempts: 1},
		&TriggerFailed{DeliveryID: "d2", IntentID: "install:x", Phase: PhaseAfterInstall, Rule: testRule, Cluster: "prod.eu-1", Enforcement: "guestbook", FailurePolicy: "Fail", StatusCode: 500, Attempts: 5, Message: "500 Internal Server Error"},
		&TriggerAttempted{DeliveryID: "d2", IntentID: "install:x", IntentSequence: 5, Phase: PhaseAfterInstall, Rule: testRule, Cluster: "prod.eu-1", Enforcement: "guestbook",
			Series: "event-9-1", Attempt: 2, Result: "server_error", StatusCode: 503, DurationMillis: 12, WillRetry: true, RetryInMillis: 1000},
		&ComplianceChanged{Cluster: "cluster1", Namespace: "cluster1", Claim: "policy-watcher-claim", Value: Compliant, Previous: NonCompliant, Since: since, Policies: 2},
		&ClaimUpdated{Cluster: "cluster1", Claim: "policy-watcher-claim", Value: Compliant, Previous: NonCompliant, ComplianceID: "compliance:cluster1"},
		&RemovalsReleased{Source: testSource, Trip: 12, Clusters: []string{"prod.eu-1"}, By: "ops@laptop"},
	}
}
