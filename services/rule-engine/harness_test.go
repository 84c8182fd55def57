package main

// Component-test harness: a real embedded NATS per test, one real kube-apiserver per package
// (with the ClusterRule CRD from deploy/), and the service started through run with a map for
// its environment.

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/api/crds"
	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestMain(m *testing.M) { os.Exit(testenv.RunWithSharedKube(m)) }

// testNamespaces makes every test's namespace distinct on the shared API server.
var testNamespaces atomic.Int32

// env is one test's world: API server, NATS, and a namespace the service watches.
type env struct {
	t    *testing.T
	kube *testenv.Kube
	c    client.Client
	nats *testenv.NATS
	nc   *nats.Conn
	js   jetstream.JetStream
	pub  *events.Publisher
	ns   string
	vars map[string]string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	kube := testenv.SharedKube(t)
	// The CRDs the preview validates against (pkg/api/crds, a copy of the chart's).
	enforcementCRDs, err := crds.All()
	if err != nil {
		t.Fatal(err)
	}
	kube.InstallCRDs(t, enforcementCRDs...)
	c := kube.TypedClient(t, v1beta1.AddToScheme)
	n := testenv.StartNATS(t)
	nc, js := eventstest.Bus(t, n.URL())
	ns := kube.Namespace(t, fmt.Sprintf("re-%s-%d", strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))[:min(len(t.Name()), 30)], testNamespaces.Add(1)))
	// The test's rules live outside OPERATOR_NAMESPACE (enforcement): a grant that allows
	// everything lets them act as before tenancy; tenancy_test.go tests narrower grants.
	grantEverything(t, c, ns)
	return &env{t: t, kube: kube, c: c, nats: n, nc: nc, js: js, pub: events.NewPublisher(js, "/test"), ns: ns,
		vars: map[string]string{"NATS_URL": n.URL(), "KUBECONFIG": kube.Kubeconfig, "WATCH_NAMESPACES": ns, "LOG_LEVEL": "warn",
			"STATUS_INTERVAL": "20ms"}}
}

// start runs the service until the returned stop is called (or the test ends); it waits for
// /readyz to answer 200. stop cancels and checks that run returns nil promptly.
func (e *env) start() (stop func()) {
	e.t.Helper()
	return e.startService().Stop
}

// startService starts the service, waits until it is ready and returns it.
func (e *env) startService() *testenv.Service {
	e.t.Helper()
	s := testenv.StartService(e.t, func(ctx context.Context, getenv func(string) string, logs io.Writer) error {
		return run(ctx, getenv, logs, io.Discard)
	}, e.vars)
	s.WaitReady(30 * time.Second)
	return s
}

// rancherSource is the source the test rules use: default Secret, no filters.
func rancherSource() events.SourceRef {
	return events.SourceRef{Kind: "rancher", ID: events.SourceID("rancher", "enforcement", "rancher", nil),
		SecretNamespace: "enforcement", SecretName: "rancher"}
}

// publish publishes events as the other services would.
func (e *env) publish(evs ...events.Event) {
	e.t.Helper()
	for _, ev := range evs {
		if _, err := e.pub.Publish(context.Background(), ev); err != nil {
			e.t.Fatal(err)
		}
	}
}

func appeared(c events.Cluster, rev uint64) *events.ClusterAppeared {
	return &events.ClusterAppeared{Cluster: c, Revision: rev}
}

// intents reads every intent in the stream, in order.
func (e *env) intents() []events.Event {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := e.js.OrderedConsumer(ctx, events.StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"enforcement.intent.>"}})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []events.Event
	for {
		batch, err := cons.FetchNoWait(500)
		if err != nil {
			e.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			ev, _, err := events.Decode(m.Subject(), m.Headers(), m.Data())
			if err != nil {
				e.t.Fatal(err)
			}
			out = append(out, ev)
		}
		if n == 0 {
			return out
		}
	}
}

// intentSummary is an intent in one line: "install cluster enforcement" or
// "uninstall cluster enforcement Reason".
func intentSummary(ev events.Event) string {
	switch i := ev.(type) {
	case *events.InstallIntent:
		return "install " + i.Cluster.Name + " " + i.Enforcement.Name
	case *events.UninstallIntent:
		return "uninstall " + i.Cluster.Name + " " + i.Enforcement + " " + i.Reason
	}
	return ev.Type()
}

// waitIntents waits until the stream holds exactly want intents (as summaries, in order) and
// returns them.
func (e *env) waitIntents(want ...string) []events.Event {
	e.t.Helper()
	var got []events.Event
	testenv.Eventually(e.t, 20*time.Second, func() error {
		got = e.intents()
		var s []string
		for _, ev := range got {
			s = append(s, intentSummary(ev))
		}
		if strings.Join(s, "\n") != strings.Join(want, "\n") {
			return fmt.Errorf("intents:\n%s\nwant:\n%s", strings.Join(s, "\n"), strings.Join(want, "\n"))
		}
		return nil
	})
	return got
}

// waitIntentsOfClusters is waitIntents for intents of different clusters, whose order among
// themselves is not defined (each cluster's events are handled on their own): it compares the
// sorted lists.
func (e *env) waitIntentsOfClusters(want ...string) {
	e.t.Helper()
	want = slices.Sorted(slices.Values(want))
	testenv.Eventually(e.t, 20*time.Second, func() error {
		var s []string
		for _, ev := range e.intents() {
			s = append(s, intentSummary(ev))
		}
		slices.Sort(s)
		if !slices.Equal(s, want) {
			return fmt.Errorf("intents (sorted):\n%s\nwant:\n%s", strings.Join(s, "\n"), strings.Join(want, "\n"))
		}
		return nil
	})
}

// createRule creates a ClusterRule in the test's namespace.
func (e *env) createRule(name string, spec v1beta1.ClusterRuleSpec) *v1beta1.ClusterRule {
	e.t.Helper()
	cr := &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name}, Spec: spec}
	if err := e.c.Create(context.Background(), cr); err != nil {
		e.t.Fatal(err)
	}
	return cr
}

// updateRule applies mutate to the current ClusterRule and writes it, again on a conflict.
func (e *env) updateRule(name string, mutate func(*v1beta1.ClusterRule)) {
	e.t.Helper()
	testenv.Eventually(e.t, 10*time.Second, func() error {
		cr := e.rule(name)
		mutate(cr)
		return e.c.Update(context.Background(), cr)
	})
}

// deleteRule deletes a ClusterRule (its finalizer may keep it until the engine lets go).
func (e *env) deleteRule(name string) {
	e.t.Helper()
	if err := e.c.Delete(context.Background(), e.rule(name)); err != nil {
		e.t.Fatal(err)
	}
}

// waitRuleGone waits until the ClusterRule no longer exists.
func (e *env) waitRuleGone(name string) {
	e.t.Helper()
	testenv.Eventually(e.t, 20*time.Second, func() error {
		err := e.c.Get(context.Background(), types.NamespacedName{Namespace: e.ns, Name: name}, &v1beta1.ClusterRule{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("rule %s still there (err %w)", name, err)
		}
		return nil
	})
}

// rule reads a ClusterRule.
func (e *env) rule(name string) *v1beta1.ClusterRule {
	e.t.Helper()
	var cr v1beta1.ClusterRule
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: e.ns, Name: name}, &cr); err != nil {
		e.t.Fatal(err)
	}
	return &cr
}

// waitReady waits until the rule's Ready condition has reason (and its status passes check).
func (e *env) waitReady(name, reason string, check func(st v1beta1.ClusterRuleStatus) error) *v1beta1.ClusterRule {
	e.t.Helper()
	var cr *v1beta1.ClusterRule
	testenv.Eventually(e.t, 20*time.Second, func() error {
		cr = e.rule(name)
		var got string
		for _, c := range cr.Status.Conditions {
			if c.Type == v1beta1.ConditionReady {
				got = c.Reason + ": " + c.Message
				if c.Reason == reason && c.ObservedGeneration == cr.Generation && cr.Status.ObservedGeneration == cr.Generation {
					if check != nil {
						return check(cr.Status)
					}
					return nil
				}
			}
		}
		return fmt.Errorf("Ready = %q, want reason %s", got, reason)
	})
	return cr
}

// waitIntentSet is waitIntents ignoring order (pairs of different clusters are evaluated in no
// particular order; the order of one pair's intents is checked where it matters).
func (e *env) waitIntentSet(want ...string) []events.Event {
	e.t.Helper()
	var got []events.Event
	testenv.Eventually(e.t, 20*time.Second, func() error {
		got = e.intents()
		count := map[string]int{}
		for _, w := range want {
			count[w]++
		}
		for _, ev := range got {
			count[intentSummary(ev)]--
		}
		for k, v := range count {
			if v != 0 {
				return fmt.Errorf("intent %q: %+d", k, -v)
			}
		}
		return nil
	})
	return got
}

// grantEverything creates, in the default OPERATOR_NAMESPACE, a ClusterRuleGrant named after ns
// that lets the rules of ns use every source, Secret, cluster, repository, namespace,
// cluster-scoped kind and webhook endpoint.
func grantEverything(t *testing.T, c client.Client, ns string) {
	t.Helper()
	testenv.SharedKube(t).Namespace(t, "enforcement")
	var sources []v1beta1.GrantSource
	for _, kind := range events.SourceKinds {
		sources = append(sources, v1beta1.GrantSource{Kind: kind, SecretNames: []string{"*"}})
	}
	g := &v1beta1.ClusterRuleGrant{ObjectMeta: metav1.ObjectMeta{Namespace: "enforcement", Name: ns},
		Spec: v1beta1.ClusterRuleGrantSpec{SourceNamespaces: []string{ns}, Sources: sources, SourceRepos: []string{"*"},
			DestinationNamespaces: []string{"*"}, WebhookEndpoints: []string{"*"},
			ClusterResourceWhitelist: []metav1.GroupKind{{Group: "*", Kind: "*"}}}}
	if err := c.Create(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), g) })
}
