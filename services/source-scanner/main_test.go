package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/pkg/testenv/rancherfake"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
)

func rule(ns, name string, src v1beta1.Source) *v1beta1.ClusterRule {
	return &v1beta1.ClusterRule{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1beta1.ClusterRuleSpec{
			Enforcements: []v1beta1.Enforcement{{Name: "baseline", Repo: "https://git.example/baseline.git"}},
			Source:       src,
		},
	}
}

func TestSourcesFromRules(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	withRelease := func(r *v1beta1.ClusterRule, v string) *v1beta1.ClusterRule {
		r.Annotations = map[string]string{scanner.ReleaseAnnotation: v}
		return r
	}
	rke := events.SourceID("rancher", "enforcement", "rancher", map[string]string{"provider": "rke"})
	rules := []v1beta1.ClusterRule{
		*rule("a", "r1", v1beta1.Source{Rancher: &v1beta1.RancherSource{Filters: map[string]string{"provider": "rke"}}}),
		*withRelease(rule("b", "r2", v1beta1.Source{Rancher: &v1beta1.RancherSource{Filters: map[string]string{"provider": "rke"}, Labels: map[string]string{"x": "y"}}}), rke+"/7"),
		*withRelease(rule("enforcement", "r3", v1beta1.Source{Rancher: &v1beta1.RancherSource{Filters: map[string]string{"provider": "rke"}}}), "all"),
		*withRelease(rule("enforcement", "r3b", v1beta1.Source{Rancher: &v1beta1.RancherSource{Filters: map[string]string{"provider": "rke"}}}), rke+"/9"),
		*withRelease(rule("enforcement", "r3c", v1beta1.Source{Rancher: &v1beta1.RancherSource{Filters: map[string]string{"provider": "rke"}}}), "12"),
		// rule-engine's release of a rule edit: not a trip, not ignored here either.
		*withRelease(rule("enforcement", "r3d", v1beta1.Source{Rancher: &v1beta1.RancherSource{Filters: map[string]string{"provider": "rke"}}}), "generation/4"),
		*rule("a", "r4", v1beta1.Source{SecretName: "rancher-secret", Rancher: &v1beta1.RancherSource{}}),
		*rule("a", "r5", v1beta1.Source{Static: &v1beta1.StaticSource{}}),
		*rule("a", "r6", v1beta1.Source{Static: &v1beta1.StaticSource{ConfigMap: "enforcement-static-clusters"}}),
		*rule("a", "r7", v1beta1.Source{Static: &v1beta1.StaticSource{ConfigMap: "lab"}}),
		*rule("a", "r8", v1beta1.Source{EKS: &v1beta1.EKSSource{}}),
		*rule("a", "r9", v1beta1.Source{EKS: &v1beta1.EKSSource{Regions: []string{"us-east-1", " eu-west-1", "us-east-1"}, Tags: map[string]string{"env": "prod"}}}),
		*rule("b", "r10", v1beta1.Source{EKS: &v1beta1.EKSSource{Regions: []string{"eu-west-1", "us-east-1"}}}),
		*rule("a", "r11", v1beta1.Source{GKE: &v1beta1.GKESource{Projects: []string{"b", "a"}, Filters: map[string]string{"location": "europe-*"}}}),
		*rule("a", "r12", v1beta1.Source{SecretName: "gke-key", GKE: &v1beta1.GKESource{Projects: []string{"a"}}}),
		*rule("a", "r13", v1beta1.Source{OCM: &v1beta1.OCMSource{Claims: map[string]string{"x": "y"}}}),
		*rule("b", "r14", v1beta1.Source{OCM: &v1beta1.OCMSource{Labels: map[string]string{"env": "prod"}}}),
		*rule("a", "r15", v1beta1.Source{}),
	}
	everything := v1beta1.ClusterRuleGrant{ObjectMeta: metav1.ObjectMeta{Namespace: "enforcement", Name: "everything"},
		Spec: v1beta1.ClusterRuleGrantSpec{SourceNamespaces: []string{"*"}}}
	for _, k := range events.SourceKinds {
		everything.Spec.Sources = append(everything.Spec.Sources, v1beta1.GrantSource{Kind: k, SecretNames: []string{"*"}})
	}
	specs, ignored := sourcesFromRules(rules, []v1beta1.ClusterRuleGrant{everything}, "enforcement", logger)
	var got []string
	for _, s := range specs {
		got = append(got, fmt.Sprintf("%s/%s %v cm=%s regions=%v projects=%v release=%v %v", s.Ref.Kind, s.Ref.SecretName, s.Filters, s.ConfigMap,
			s.Regions, s.Projects, s.Releases, s.Rules))
		if s.Ref.SecretNamespace != "enforcement" {
			t.Errorf("secret namespace %q", s.Ref.SecretNamespace)
		}
	}
	slices.Sort(got)
	// The rule without a source kind (r15) is dropped; two eks rules listing the same regions in
	// another order and spelling share a source, the two ocm rules too.
	want := []string{
		"eks/eks map[] cm= regions=[] projects=[] release=[] [a/r8]",
		"eks/eks map[] cm= regions=[us-east-1  eu-west-1 us-east-1] projects=[] release=[] [a/r9 b/r10]",
		"gke/gke map[location:europe-*] cm= regions=[] projects=[b a] release=[] [a/r11]",
		"gke/gke-key map[] cm= regions=[] projects=[a] release=[] [a/r12]",
		"ocm/ocm map[] cm= regions=[] projects=[] release=[] [a/r13 b/r14]",
		"rancher/rancher map[provider:rke] cm= regions=[] projects=[] release=[{enforcement/r3b 9}] [a/r1 b/r2 enforcement/r3 enforcement/r3b enforcement/r3c enforcement/r3d]",
		"rancher/rancher-secret map[] cm= regions=[] projects=[] release=[] [a/r4]",
		"static/static map[] cm=enforcement-static-clusters regions=[] projects=[] release=[] [a/r5 a/r6]",
		"static/static map[] cm=lab regions=[] projects=[] release=[] [a/r7]",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("sources:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Only a rule in the operator namespace releases, and only with "<source id>/<trip>": the
	// tenant's rule b/r2 and the malformed values are ignored, each with the reason.
	var why []string
	for _, ig := range ignored {
		why = append(why, ig.Rule+": "+ig.Why)
	}
	wantWhy := []string{
		"b/r2: held removals are released only from ClusterRules in the operator namespace enforcement",
		`enforcement/r3: release value "all": want ` + rke + "/<trip>",
		`enforcement/r3c: release value "12": want ` + rke + "/<trip>",
	}
	if !slices.Equal(why, wantWhy) {
		t.Fatalf("ignored releases:\n%s\nwant:\n%s", strings.Join(why, "\n"), strings.Join(wantWhy, "\n"))
	}
	// The id is the documented algorithm over (kind, namespace, secret, filters); the default
	// static ConfigMap adds no filter, another one adds configMap=<name> (pkg/events pins the
	// algorithm's golden values; TestPublishedSourceIsTheRuleSource checks published events).
	wantIDs := map[string]string{
		"rancher/rancher":                    events.SourceID("rancher", "enforcement", "rancher", map[string]string{"provider": "rke"}),
		"rancher/rancher-secret":             events.SourceID("rancher", "enforcement", "rancher-secret", nil),
		"static/enforcement-static-clusters": events.SourceID("static", "enforcement", "static", nil),
		"static/lab":                         events.SourceID("static", "enforcement", "static", map[string]string{"configMap": "lab"}),
		"eks/eks a/r8":                       events.SourceID("eks", "enforcement", "eks", nil),
		"eks/eks a/r9":                       events.SourceID("eks", "enforcement", "eks", map[string]string{"regions": "eu-west-1,us-east-1"}),
		"gke/gke":                            events.SourceID("gke", "enforcement", "gke", map[string]string{"location": "europe-*", "projects": "a,b"}),
		"gke/gke-key":                        events.SourceID("gke", "enforcement", "gke-key", map[string]string{"projects": "a"}),
		"ocm/ocm":                            events.SourceID("ocm", "enforcement", "ocm", nil),
	}
	for _, s := range specs {
		name := s.Ref.Kind + "/" + s.Ref.SecretName
		switch s.Ref.Kind {
		case "static":
			name = "static/" + s.ConfigMap
		case "eks":
			name += " " + s.Rules[0]
		}
		if s.Ref.ID != wantIDs[name] {
			t.Errorf("%s: id %s, want %s", name, s.Ref.ID, wantIDs[name])
		}
	}
}

// TestTenantRulesScanOnlyWhatAGrantAllows: a rule outside the operator namespace makes the
// scanner list its source only when a ClusterRuleGrant of the operator namespace covers the rule's
// namespace and allows the source's kind and Secret; a grant elsewhere, a deleted grant or one for
// another Secret counts for nothing. Rules in the operator namespace need no grant.
func TestTenantRulesScanOnlyWhatAGrantAllows(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	teamA := v1beta1.ClusterRuleGrant{ObjectMeta: metav1.ObjectMeta{Namespace: "enforcement", Name: "team-a"},
		Spec: v1beta1.ClusterRuleGrantSpec{SourceNamespaces: []string{"team-a"},
			Sources: []v1beta1.GrantSource{{Kind: "rancher"}, {Kind: "eks", SecretNames: []string{"eks-team-*"}}}}}
	deleted := *teamA.DeepCopy()
	deleted.Name, deleted.Spec.SourceNamespaces = "team-b", []string{"team-b"}
	deleted.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	rules := []v1beta1.ClusterRule{
		*rule("team-a", "granted", v1beta1.Source{Rancher: &v1beta1.RancherSource{}}),
		*rule("team-a", "granted-secret", v1beta1.Source{SecretName: "eks-team-a", EKS: &v1beta1.EKSSource{}}),
		*rule("team-a", "other-secret", v1beta1.Source{SecretName: "eks-prod", EKS: &v1beta1.EKSSource{}}),
		*rule("team-a", "other-kind", v1beta1.Source{GKE: &v1beta1.GKESource{Projects: []string{"p"}}}),
		*rule("team-b", "deleted-grant", v1beta1.Source{Static: &v1beta1.StaticSource{}}),
		*rule("team-c", "no-grant", v1beta1.Source{OCM: &v1beta1.OCMSource{}}),
		*rule("enforcement", "operator", v1beta1.Source{AKS: &v1beta1.AKSSource{Subscriptions: []string{"s"}}}),
	}
	specs, _ := sourcesFromRules(rules, []v1beta1.ClusterRuleGrant{teamA, deleted}, "enforcement", logger)
	var got []string
	for _, s := range specs {
		got = append(got, strings.Join(s.Rules, ","))
	}
	slices.Sort(got)
	if want := []string{"enforcement/operator", "team-a/granted", "team-a/granted-secret"}; !slices.Equal(got, want) {
		t.Errorf("scanned the sources of %v, want %v", got, want)
	}
	if specs, _ := sourcesFromRules(rules, nil, "enforcement", logger); len(specs) != 1 || specs[0].Rules[0] != "enforcement/operator" {
		t.Errorf("without grants: %d sources, want only the operator's rule's", len(specs))
	}
}

func TestConfigErrorsNameTheVariable(t *testing.T) {
	for name, value := range map[string]string{
		"SCAN_INTERVAL": "soon", "GONE_GRACE_PERIOD": "-1m", "MAX_REMOVAL_FRACTION": "2", "LIST_TIMEOUT": "0s",
		"EKS_REDESCRIBE_INTERVAL": "0s", "EKS_ENDPOINT": "eks.local", "EKS_STS_ENDPOINT": "https://", "GKE_ENDPOINT": "ftp://gke.local/",
	} {
		env := map[string]string{name: value}
		_, err := loadConfig(func(k string) string { return env[k] })
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: err = %v", name, value, err)
		}
	}
	cfg, err := loadConfig(func(string) string { return "" })
	if err != nil || cfg.ScanInterval != 30*time.Second || cfg.GracePeriod != 10*time.Minute ||
		cfg.MaxRemovalFraction != 0.1 || cfg.OperatorNamespace != "enforcement" {
		t.Fatalf("defaults: %+v, %v", cfg, err)
	}
	if cfg.EKSRedescribeInterval != 10*time.Minute || cfg.EKSEndpoint != "" || cfg.GKEEndpoint != "" {
		t.Fatalf("cloud defaults: %+v", cfg)
	}
	cfg, err = loadConfig(func(k string) string {
		return map[string]string{"GKE_ENDPOINT": "http://127.0.0.1:9", "EKS_ENDPOINT": "http://127.0.0.1:8"}[k]
	})
	if err != nil || cfg.GKEEndpoint != "http://127.0.0.1:9/" || cfg.EKSEndpoint != "http://127.0.0.1:8" {
		t.Fatalf("endpoints: %q %q, %v", cfg.GKEEndpoint, cfg.EKSEndpoint, err)
	}
}

// stream reads the ENFORCEMENT stream from the start, as any subscriber could.
type stream struct {
	t      *testing.T
	js     jetstream.JetStream
	reader *eventstest.Reader
	mu     sync.Mutex
	seen   []string
	// held are the RemovalsHeld events, in stream order.
	held []*events.SourceDegraded
}

// poll appends the events stored since the last poll, rendered as "appeared <kind> <name>".
func (s *stream) poll() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.reader.New(s.t) {
		switch e := e.(type) {
		case *events.ClusterAppeared:
			s.seen = append(s.seen, "appeared "+e.Cluster.Source.Kind+" "+e.Cluster.Name)
		case *events.ClusterUpdated:
			s.seen = append(s.seen, "updated "+e.Cluster.Source.Kind+" "+e.Cluster.Name+" "+strings.Join(e.Changed, ","))
		case *events.ClusterGone:
			s.seen = append(s.seen, "gone "+e.Source.Kind+" "+e.Name)
		case *events.SourceDegraded:
			s.seen = append(s.seen, "degraded "+e.Source.Kind+" "+e.Reason)
			if e.Reason == events.DegradedRemovalsHeld {
				s.held = append(s.held, e)
			}
		}
	}
	return s.seen
}

// waitFor waits until every wanted event has been seen.
func (s *stream) waitFor(want ...string) {
	s.t.Helper()
	testenv.Eventually(s.t, 20*time.Second, func() error {
		seen := s.poll()
		missing := []string{}
		for _, w := range want {
			if !slices.Contains(seen, w) {
				missing = append(missing, w)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("events %q never came; seen %q", missing, seen)
		}
		return nil
	})
}

func (s *stream) count(event string) int {
	n := 0
	for _, e := range s.poll() {
		if e == event {
			n++
		}
	}
	return n
}

// TestRun runs the service against the real kube-apiserver (ClusterRule CRD, Secrets,
// ConfigMaps), embedded NATS and a fake Rancher: Rancher clusters appear through a rule's
// filters, a static ConfigMap's clusters appear, change and go, a broken Secret degrades the
// source, a restart announces nothing again, and cancelling ctx stops the service promptly.
func TestRun(t *testing.T) {
	e := newServiceEnv(t, "run")
	e.env["LIST_TIMEOUT"] = "2s"
	ns, k, s := e.ns, e.k, e.s
	ctx := context.Background()

	fake := rancherfake.New(t, "tok-77aa", 2)
	eks := rancherfake.Cluster("c-eks", "eks-1", "active", nil)
	eks["provider"] = "eks"
	fake.SetClusters(
		rancherfake.Cluster("c-1", "prod-1", "active", map[string]string{"env": "prod"}),
		rancherfake.Cluster("c-2", "prod-2", "provisioning", nil),
		rancherfake.Cluster("c-3", "prod-3", "active", nil),
		eks,
	)
	must := e.must
	e.secret("rancher", map[string][]byte{"url": []byte(fake.URL), "token": []byte(fake.Token), "caCert": fake.CACertPEM()})
	e.rule("rke", v1beta1.Source{Rancher: &v1beta1.RancherSource{Filters: map[string]string{"provider": "rke"}}})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "enforcement-static-clusters"},
		Data: map[string]string{"clusters.yaml": `
- {name: edge-1, url: "https://edge-1:6443", labels: {env: prod}}
- {name: edge-2, url: "https://edge-2:6443"}
- {name: edge-3, url: "https://edge-3:6443"}
`}}
	must(k.Create(ctx, cm))
	e.rule("edges", v1beta1.Source{Static: &v1beta1.StaticSource{}})

	stop := e.start()
	s.waitFor("appeared rancher prod-1", "appeared rancher prod-2", "appeared rancher prod-3",
		"appeared static edge-1", "appeared static edge-2", "appeared static edge-3")
	if s.count("appeared rancher eks-1") != 0 {
		t.Fatal("the rule's filter provider=rke did not reach Rancher")
	}

	// Static: change one, remove one, add one.
	cm.Data["clusters.yaml"] = `
- {name: edge-1, url: "https://edge-1:6443", labels: {env: staging}}
- {name: edge-2, url: "https://edge-2:6443"}
- {name: edge-4, url: "https://edge-4:6443"}
`
	must(k.Update(ctx, cm))
	s.waitFor("updated static edge-1 labels", "appeared static edge-4", "gone static edge-3")

	// Two of three vanish at once: more than the breaker's one per scan, so both are held until
	// an operator annotates a rule of the source in OPERATOR_NAMESPACE with the trip.
	cm.Data["clusters.yaml"] = `[{name: edge-1, url: "https://edge-1:6443"}]`
	must(k.Update(ctx, cm))
	s.waitFor("degraded static RemovalsHeld")
	time.Sleep(500 * time.Millisecond)
	if s.count("gone static edge-2")+s.count("gone static edge-4") != 0 {
		t.Fatal("held removals were published")
	}
	s.mu.Lock()
	trip := s.held[0] // the first RemovalsHeld event is the trip's scan
	s.mu.Unlock()
	ops := rule(ns, "edges-ops", v1beta1.Source{Static: &v1beta1.StaticSource{}})
	ops.Annotations = map[string]string{scanner.ReleaseAnnotation: scanner.ReleaseValue(trip.Source.ID, trip.Scan)}
	must(k.Create(ctx, ops))
	s.waitFor("gone static edge-2", "gone static edge-4")

	// A malformed ConfigMap, then a missing one, degrade the static source and remove nothing.
	cm.Data["clusters.yaml"] = "- name: ["
	must(k.Update(ctx, cm))
	s.waitFor("degraded static ListFailed")
	must(k.Delete(ctx, cm))
	n := s.count("degraded static ListFailed")
	// Several scans, longer than the grace period.
	testenv.EventuallyTrue(t, 10*time.Second, "the missing ConfigMap degraded the static source twice", func() bool {
		return s.count("degraded static ListFailed") >= n+2
	})
	if s.count("gone static edge-1") != 0 {
		t.Fatal("edge-1 gone while the static ConfigMap was malformed or missing")
	}

	// A Secret without a token degrades the Rancher source and removes nothing.
	var secret corev1.Secret
	must(k.Get(ctx, client.ObjectKey{Namespace: ns, Name: "rancher"}, &secret))
	delete(secret.Data, "token")
	must(k.Update(ctx, &secret))
	s.waitFor("degraded rancher SecretInvalid")
	time.Sleep(500 * time.Millisecond) // longer than the grace period
	for _, c := range []string{"prod-1", "prod-2", "prod-3"} {
		if s.count("gone rancher "+c) != 0 {
			t.Fatalf("%s gone while the Secret was invalid", c)
		}
	}
	if strings.Contains(strings.Join(s.poll(), " "), fake.Token) {
		t.Fatal("the token appears in an event")
	}
	secret.Data["token"] = []byte(fake.Token)
	must(k.Update(ctx, &secret))

	// Restart: nothing is announced again.
	stop()
	before := len(s.poll())
	stop = e.start()
	time.Sleep(500 * time.Millisecond)
	for _, e := range s.poll()[before:] {
		if strings.HasPrefix(e, "appeared") || strings.HasPrefix(e, "updated") {
			t.Fatalf("after restart: %s", e)
		}
	}
	stop()
}
