package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/eks"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/eks/eksfake"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/gke/gkefake"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner/scannertest"
)

// The EKS, GKE and OCM tests share one API server (TestRun starts its own).
func TestMain(m *testing.M) { os.Exit(testenv.RunWithSharedKube(m)) }

// serviceEnv is one run of the service against the shared API server and its own NATS.
type serviceEnv struct {
	t       *testing.T
	kube    *testenv.Kube
	k       client.Client // with the ClusterRule type
	ns      string        // OPERATOR_NAMESPACE
	rulesNS string
	env     map[string]string
	s       *stream
	svc     *testenv.Service // the instance start ran last
}

// newServiceEnv prepares namespaces and NATS; the rules of both namespaces are deleted when the
// test ends (after the service stopped), so that the next test's service does not scan them.
func newServiceEnv(t *testing.T, prefix string) *serviceEnv {
	t.Helper()
	kube := testenv.SharedKube(t)
	k := kube.TypedClient(t, v1beta1.AddToScheme)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kube.InstallCRDsFromDir(t, filepath.Join(root, "deploy", "k8s", "enforcement-crds", "crds"))
	srvNATS := testenv.StartNATS(t)
	e := &serviceEnv{t: t, kube: kube, k: k, ns: kube.Namespace(t, prefix+"-operator"), rulesNS: kube.Namespace(t, prefix+"-rules")}
	e.env = map[string]string{
		"NATS_URL": srvNATS.URL(), "KUBECONFIG": kube.Kubeconfig, "OPERATOR_NAMESPACE": e.ns,
		"SCAN_INTERVAL": "100ms", "GONE_GRACE_PERIOD": "300ms", "LIST_TIMEOUT": "5s",
	}
	// The rules live in a namespace of their own, which a grant lets use every source (the
	// scanner lists a tenant rule's source only under a grant; TestTenantRulesScanOnlyWhatAGrantAllows).
	grant := &v1beta1.ClusterRuleGrant{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "rules"},
		Spec: v1beta1.ClusterRuleGrantSpec{SourceNamespaces: []string{e.rulesNS}, SourceRepos: []string{"*"}, DestinationNamespaces: []string{"*"}}}
	for _, kind := range events.SourceKinds {
		grant.Spec.Sources = append(grant.Spec.Sources, v1beta1.GrantSource{Kind: kind, SecretNames: []string{"*"}})
	}
	e.must(k.Create(context.Background(), grant))
	t.Cleanup(func() {
		_ = k.DeleteAllOf(context.Background(), &v1beta1.ClusterRule{}, client.InNamespace(e.rulesNS))
		_ = k.DeleteAllOf(context.Background(), &v1beta1.ClusterRule{}, client.InNamespace(e.ns)) // release tests' rules
	})
	_, js := eventstest.Bus(t, srvNATS.URL())
	e.s = &stream{t: t, js: js, reader: eventstest.NewReader(t, js)}
	return e
}

func (e *serviceEnv) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *serviceEnv) rule(name string, src v1beta1.Source) {
	e.t.Helper()
	e.must(e.k.Create(context.Background(), rule(e.rulesNS, name, src)))
}

func (e *serviceEnv) secret(name string, data map[string][]byte) {
	e.t.Helper()
	e.must(e.k.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name}, Data: data}))
}

// start runs the service, with a free HEALTH_ADDR and METRICS_ADDR, until the returned stop
// (also called when the test ends), and waits until it is ready.
func (e *serviceEnv) start() (stop func()) {
	e.t.Helper()
	e.svc = testenv.StartService(e.t, func(ctx context.Context, getenv func(string) string, logs io.Writer) error {
		return run(ctx, getenv, logs, io.Discard)
	}, e.env)
	e.svc.WaitReady(20 * time.Second)
	return e.svc.Stop
}

// withPrefix counts the events starting with prefix.
func (s *stream) withPrefix(prefix string) int {
	n := 0
	for _, e := range s.poll() {
		if strings.HasPrefix(e, prefix) {
			n++
		}
	}
	return n
}

// waitForPrefix waits until at least n events start with prefix.
func (s *stream) waitForPrefix(prefix string, n int) {
	s.t.Helper()
	testenv.Eventually(s.t, 20*time.Second, func() error {
		if s.withPrefix(prefix) < n {
			return fmt.Errorf("fewer than %d events %q came; seen %q", n, prefix, s.poll())
		}
		return nil
	})
}

// metrics returns the service's /metrics text.
func (e *serviceEnv) metrics() string {
	e.t.Helper()
	resp, err := http.Get("http://" + e.svc.Metrics + "/metrics")
	e.must(err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	e.must(err)
	return string(b)
}

// TestRunEKS: rules with an eks source are listed through the real SDK client against the EKS
// fake (EKS_ENDPOINT): with static keys from a named Secret, with the SDK's default chain when
// the rule names no Secret and there is no "eks" Secret, a malformed Secret degrades its source,
// a CREATING cluster becoming ACTIVE is an update, and the API calls are counted.
func TestRunEKS(t *testing.T) {
	fake := eksfake.New(t)
	fake.Add("eu-west-1", "prod-a", "ACTIVE", map[string]string{"env": "prod"})
	fake.Add("eu-west-1", "prod-b", "ACTIVE", nil)
	fake.Add("us-east-1", "Lab_1", "CREATING", nil)
	// The default chain reads the process environment (here static keys; in production IRSA,
	// Pod Identity or the instance role). Nothing else of the host may leak in.
	t.Setenv("AWS_ACCESS_KEY_ID", eksfake.DefaultKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", "default-chain-secret")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")

	e := newServiceEnv(t, "eks")
	e.env["EKS_ENDPOINT"], e.env["EKS_STS_ENDPOINT"] = fake.URL, fake.URL
	e.secret("eks-keys", map[string][]byte{"aws_access_key_id": []byte(eksfake.DefaultKeyID), "aws_secret_access_key": []byte("s3cr3t-value")})
	e.secret("eks-bad", map[string][]byte{"aws_access_key_id": []byte(eksfake.DefaultKeyID)})
	e.rule("prod", v1beta1.Source{SecretName: "eks-keys", EKS: &v1beta1.EKSSource{Regions: []string{"eu-west-1"}, Tags: map[string]string{"env": "prod"}}})
	e.rule("lab", v1beta1.Source{EKS: &v1beta1.EKSSource{Regions: []string{"us-east-1"}}})
	e.rule("bad", v1beta1.Source{SecretName: "eks-bad", EKS: &v1beta1.EKSSource{Regions: []string{"eu-west-1"}}})
	// An older version announced Old_Lab under its 32-bit name: the service keeps that name.
	fake.Add("us-east-1", "Old_Lab", "ACTIVE", nil)
	oldLab := events.LegacyObjectName("Old_Lab")
	e.olderEKSScan(fake, v1beta1.Source{EKS: &v1beta1.EKSSource{Regions: []string{"us-east-1"}}}, "Old_Lab")
	e.start()

	lab := events.ObjectName("Lab_1") // new: the 64-bit name
	e.s.waitFor("appeared eks prod-a", "appeared eks prod-b", "appeared eks "+lab, "appeared eks "+oldLab, "degraded eks SecretInvalid")
	fake.Set("us-east-1", "Lab_1", "status", "ACTIVE")
	e.s.waitForPrefix("updated eks "+lab+" ", 1)
	for _, ev := range e.s.poll() {
		if strings.HasPrefix(ev, "updated eks "+oldLab+" ") || strings.Contains(ev, events.ObjectName("Old_Lab")) {
			t.Fatalf("Old_Lab did not keep its name %s: %q", oldLab, ev)
		}
	}
	if strings.Contains(strings.Join(e.s.poll(), " "), "s3cr3t-value") {
		t.Fatal("the secret key appears in an event")
	}
	m := e.metrics()
	for _, want := range []string{
		`enforcement_source_scanner_eks_api_calls_total{operation="ListClusters",outcome="success"}`,
		`enforcement_source_scanner_eks_api_calls_total{operation="DescribeCluster",outcome="success"}`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	// ACTIVE clusters are not described again within EKS_REDESCRIBE_INTERVAL (10m): one
	// describe each, and one per scan for Lab_1 while it was CREATING.
	if n := fake.Count("DescribeCluster"); n > 2+fake.Count("ListClusters") {
		t.Errorf("%d DescribeCluster calls for %d ListClusters: steady scans describe again", n, fake.Count("ListClusters"))
	}
}

// olderEKSScan leaves the inventory of the eks rule source src as a version before 64-bit name
// suffixes wrote it for the clusters named only that the EKS fake lists in src's regions: under
// their 32-bit names, with their identities.
func (e *serviceEnv) olderEKSScan(fake *eksfake.Server, src v1beta1.Source, only ...string) {
	e.t.Helper()
	ctx := context.Background()
	ref, err := src.Ref(e.ns)
	e.must(err)
	kv, err := e.s.js.KeyValue(ctx, events.BucketInventory)
	e.must(err)
	l := eks.NewLister(eks.Options{Regions: src.EKS.Regions, Endpoint: fake.URL, STSEndpoint: fake.URL,
		Credentials: func(context.Context) (eks.Credentials, error) { return eks.Credentials{}, nil }})
	some := scanner.ListerFunc(func(ctx context.Context) ([]events.Cluster, error) {
		clusters, err := l.List(ctx)
		return slices.DeleteFunc(clusters, func(c events.Cluster) bool {
			name, _ := c.Attributes[eks.AttrArgoCDClusterName].(string)
			return !slices.Contains(only, name)
		}), err
	})
	sc := scanner.New(kv, events.NewPublisher(e.s.js, "/enforcement/source-scanner"), scanner.Config{},
		scanner.NewMetrics(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
	res, err := sc.ScanOnce(ctx, scanner.Source{Ref: ref, Lister: scannertest.LegacyNamed(scannertest.Identified(some, "eks:"), eks.LegacyName)})
	if err != nil || !res.Complete || res.Appeared != len(only) {
		e.t.Fatalf("older version's scan = %+v, %v", res, err)
	}
}

// TestRunGKE: rules with a gke source are listed through the real container/v1 client against the
// GKE fake (GKE_ENDPOINT): with a service-account key from a named Secret (its token from the
// fake's OAuth endpoint) and filters, with application default credentials when the rule names
// no Secret, a malformed key and an unsupported filter degrade their sources, and missingZones
// makes a listing partial.
func TestRunGKE(t *testing.T) {
	fake := gkefake.New(t)
	fake.Add("proj-a", "europe-west1", "alpha", "RUNNING", map[string]string{"env": "prod"})
	fake.Add("proj-a", "us-central1", "beta", "RUNNING", nil)
	fake.Add("proj-b", "europe-west4", "gamma", "PROVISIONING", nil)
	key := fake.KeyJSON(t)
	adc := filepath.Join(t.TempDir(), "adc.json")
	if err := os.WriteFile(adc, key, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", adc)

	e := newServiceEnv(t, "gke")
	e.env["GKE_ENDPOINT"] = fake.URL // no trailing slash: the service adds it
	e.secret("gke-key", map[string][]byte{"key.json": key})
	e.secret("gke-bad", map[string][]byte{"key.json": []byte(`{"type": "authorized_user"}`)})
	e.rule("europe", v1beta1.Source{SecretName: "gke-key", GKE: &v1beta1.GKESource{Projects: []string{"proj-a"}, Filters: map[string]string{"location": "europe-*"}}})
	e.rule("adc", v1beta1.Source{GKE: &v1beta1.GKESource{Projects: []string{"proj-b"}}})
	e.rule("bad-key", v1beta1.Source{SecretName: "gke-bad", GKE: &v1beta1.GKESource{Projects: []string{"proj-a"}}})
	e.rule("bad-filter", v1beta1.Source{SecretName: "gke-key", GKE: &v1beta1.GKESource{Projects: []string{"proj-a"}, Filters: map[string]string{"labels.env": "prod"}}})
	e.start()

	e.s.waitFor("appeared gke alpha", "appeared gke gamma", "degraded gke SecretInvalid", "degraded gke InvalidSpec")
	if e.s.count("appeared gke beta") != 0 {
		t.Fatal("the filter location=europe-* did not apply")
	}
	fake.Configure(func(f *gkefake.Server) { f.Missing["proj-b"] = []string{"europe-west4-b"} })
	e.s.waitFor("degraded gke PartialListing")
	time.Sleep(500 * time.Millisecond) // longer than the grace period
	if e.s.count("gone gke gamma") != 0 {
		t.Fatal("gamma gone while its listing was partial")
	}
	if !strings.Contains(e.metrics(), `enforcement_source_scanner_gke_api_calls_total{operation="ListClusters",outcome="success"}`) {
		t.Error("/metrics has no GKE call counter")
	}
}

// managedCluster creates or updates a ManagedCluster and writes its status as the registration
// controller would (no OCM controller runs here).
func managedCluster(t *testing.T, k client.Client, name string, claims map[string]string, available string) {
	t.Helper()
	ctx := context.Background()
	mc := &unstructured.Unstructured{}
	mc.SetAPIVersion("cluster.open-cluster-management.io/v1")
	mc.SetKind("ManagedCluster")
	err := k.Get(ctx, client.ObjectKey{Name: name}, mc)
	switch {
	case err == nil:
	case client.IgnoreNotFound(err) == nil:
		mc.SetName(name)
		mc.SetLabels(map[string]string{"env": "prod"})
		mc.Object["spec"] = map[string]any{
			"hubAcceptsClient":            true,
			"managedClusterClientConfigs": []any{map[string]any{"url": "https://" + name + ".example.com:6443"}},
		}
		if err := k.Create(ctx, mc); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal(err)
	}
	var claimList []any
	for k, v := range claims {
		claimList = append(claimList, map[string]any{"name": k, "value": v})
	}
	var conds []any
	for typ, status := range map[string]string{"HubAcceptedManagedCluster": "True", "ManagedClusterJoined": "True", "ManagedClusterConditionAvailable": available} {
		conds = append(conds, map[string]any{"type": typ, "status": status, "reason": "Test", "message": "set by the test",
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339)})
	}
	_ = unstructured.SetNestedSlice(mc.Object, claimList, "status", "clusterClaims")
	_ = unstructured.SetNestedSlice(mc.Object, conds, "status", "conditions")
	if err := k.Status().Update(ctx, mc); err != nil {
		t.Fatalf("write ManagedCluster status: %v", err)
	}
}

// TestRunOCM: ManagedClusters on the real API server with the real CRD are watched: with
// SCAN_INTERVAL at an hour, every scan after the first is triggered by a ManagedCluster change.
// Two sources read the same hub, in-cluster (no Secret) and through a kubeconfig in a Secret; a
// malformed kubeconfig degrades its source. A cluster appears, a claim flip and an availability
// change are updates, and a deleted cluster is gone only once GONE_GRACE_PERIOD has passed.
func TestRunOCM(t *testing.T) {
	e := newServiceEnv(t, "ocm")
	e.kube.InstallCRDs(t, testenv.OCMCRDs()...)
	kubeconfig, err := os.ReadFile(e.kube.Kubeconfig)
	e.must(err)
	e.env["SCAN_INTERVAL"], e.env["GONE_GRACE_PERIOD"] = "1h", "2s"
	e.secret("hub", map[string][]byte{"kubeconfig": kubeconfig})
	e.secret("hub-bad", map[string][]byte{"kubeconfig": []byte("not: [a kubeconfig")})
	e.rule("in-cluster", v1beta1.Source{OCM: &v1beta1.OCMSource{Claims: map[string]string{"policy-watcher-claim": "compliant"}}})
	e.rule("remote", v1beta1.Source{SecretName: "hub", OCM: &v1beta1.OCMSource{}})
	e.rule("bad", v1beta1.Source{SecretName: "hub-bad", OCM: &v1beta1.OCMSource{}})
	e.start()
	e.s.waitFor("degraded ocm SecretInvalid")

	managedCluster(t, e.k, "spoke-1", map[string]string{"policy-watcher-claim": "noncompliant"}, "True")
	managedCluster(t, e.k, "spoke-2", nil, "True")
	e.s.waitForPrefix("appeared ocm spoke-1", 2) // once per source
	e.s.waitForPrefix("appeared ocm spoke-2", 2)

	// A claim flip: an update with the new labels and attributes, from a triggered scan.
	managedCluster(t, e.k, "spoke-1", map[string]string{"policy-watcher-claim": "compliant"}, "True")
	e.s.waitForPrefix("updated ocm spoke-1 ", 2)
	// Availability lost: an update of state and eligibility.
	managedCluster(t, e.k, "spoke-1", map[string]string{"policy-watcher-claim": "compliant"}, "False")
	e.s.waitForPrefix("updated ocm spoke-1 ", 4)
	var last string
	for _, ev := range e.s.poll() {
		if strings.HasPrefix(ev, "updated ocm spoke-1 ") {
			last = ev
		}
	}
	if !strings.Contains(last, "eligible") || !strings.Contains(last, "state") {
		t.Fatalf("availability change: %q, want eligible and state changed", last)
	}

	// Deleted: the triggered scan marks it missing, nothing is gone within the grace period;
	// the next change on the hub after it (spoke-2's claim) completes the removal. (Deleting
	// the only cluster of a source would be an EmptyListing, never a removal.)
	deleted := time.Now()
	mc := &unstructured.Unstructured{}
	mc.SetAPIVersion("cluster.open-cluster-management.io/v1")
	mc.SetKind("ManagedCluster")
	mc.SetName("spoke-1")
	e.must(e.k.Delete(context.Background(), mc))
	time.Sleep(time.Second)
	if e.s.count("gone ocm spoke-1") != 0 {
		t.Fatal("spoke-1 gone before GONE_GRACE_PERIOD")
	}
	time.Sleep(time.Until(deleted.Add(2500 * time.Millisecond)))
	managedCluster(t, e.k, "spoke-2", map[string]string{"policy-watcher-claim": "compliant"}, "True")
	e.s.waitForPrefix("updated ocm spoke-2 ", 2)
	e.s.waitForPrefix("gone ocm spoke-1", 2)
}

// TestListersThatPageReachTheScannerAsPagedListers: the sources whose providers list in pages
// hand the scanner one page at a time, through the wrappers that stamp identities; the others
// hand over their whole listing.
func TestListersThatPageReachTheScannerAsPagedListers(t *testing.T) {
	for kind, paged := range map[string]bool{
		events.SourceKindRancher: true, events.SourceKindEKS: true, events.SourceKindAKS: true,
		events.SourceKindGKE: false, events.SourceKindStatic: false,
	} {
		l := (&sourceSpec{Ref: events.SourceRef{Kind: kind, ID: "test"}}).lister(listerDeps{})
		if _, ok := l.(scanner.PagedLister); ok != paged {
			t.Errorf("the %s lister is a scanner.PagedLister: %t, want %t", kind, ok, paged)
		}
		l.Close()
	}
}
