package main

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	applicationpkg "github.com/argoproj/argo-cd/v2/pkg/apiclient/application"
	clusterpkg "github.com/argoproj/argo-cd/v2/pkg/apiclient/cluster"
	projectpkg "github.com/argoproj/argo-cd/v2/pkg/apiclient/project"
	argov1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// withArgoAPI runs the harness's Syncer in API mode: a real argocd-server keeps its objects in
// the harness's namespace, and the Syncer logs in to it as admin. The harness's own clients
// still read what Argo CD wrote through the Kubernetes API. The managed clusters are the test
// API server itself (apiIntent), which Argo CD connects to when it registers one.
// With a proxy, the Syncer reaches Argo CD through it (proxy's target is set here).
func withArgoAPI(poll time.Duration, proxy **testenv.TCPProxy) harnessOption {
	return func(h *harness, o *SyncerOptions) {
		h.argocd = testenv.StartArgoCD(h.t, testenv.SharedKube(h.t), h.ns)
		h.registry = prometheus.NewRegistry()
		h.metrics = NewMetrics(h.registry)
		url := h.argocd.URL
		if proxy != nil {
			*proxy = testenv.NewTCPProxy(h.t, h.argocd.Addr)
			url = "http://" + (*proxy).Addr()
		}
		cfg := ArgoAPIConfig{URL: url, Username: testenv.ArgoCDAdmin, Password: h.argocd.Password, PollInterval: poll}
		session, err := newArgoSession(cfg, h.metrics)
		if err != nil {
			h.t.Fatal(err)
		}
		h.t.Cleanup(session.Close)
		h.session = session
		h.syncerArgo, o.ClusterSecrets = argoAPIClients(session, h.ns, poll, o.Logger)
		o.APIMode, o.Metrics = true, h.metrics
		h.createKubeSourceSecret()
	}
}

// createKubeSourceSecret creates the source Secret "kube" of kind rancher whose token and CA
// let Argo CD reach the test API server: a service account token from the TokenRequest API.
func (h *harness) createKubeSourceSecret() {
	h.t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "argocd-manager", Namespace: h.opNS}}
	if _, err := h.kube.CoreV1().ServiceAccounts(h.opNS).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	tr, err := h.kube.CoreV1().ServiceAccounts(h.opNS).CreateToken(ctx, sa.Name,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatalf("token for Argo CD to reach the test API server: %v", err)
	}
	kube := testenv.SharedKube(h.t)
	_, err = h.kube.CoreV1().Secrets(h.opNS).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "kube", Namespace: h.opNS},
		Data: map[string][]byte{"url": []byte("https://rancher.example"), "token": []byte(tr.Status.Token),
			"caCert": kube.Config.CAData},
	}, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
}

// kubeURLs are two URLs of the test API server, for two clusters: Argo CD keys clusters by URL.
func kubeURLs(t testing.TB) [2]string {
	host := strings.TrimSuffix(testenv.SharedKube(t).Config.Host, "/")
	return [2]string{host, strings.Replace(host, "127.0.0.1", "localhost", 1)}
}

// apiIntent is installIntent for a cluster at url, with the "kube" source Secret.
func (h *harness) apiIntent(rule, cluster, enforcement, url string) *events.InstallIntent {
	in := h.installIntent(rule, cluster, enforcement)
	in.Cluster.URL = url
	in.Cluster.Source.SecretName = "kube"
	return in
}

// requests is how many requests of method the Syncer sent to Argo CD's API.
func (h *harness) requests(method string) int {
	total := 0.0
	for _, code := range []string{"OK", "NotFound", "AlreadyExists", "InvalidArgument", "Unavailable", "Unauthenticated", "Unknown", "NotSent"} {
		total += testutil.ToFloat64(h.metrics.argocdRequests.WithLabelValues(method, code))
	}
	return int(total)
}

// TestAPIModeWritesWhatDeclarativeModeWrites carries intents through a real argocd-server and
// reads back, through the Kubernetes API, what Argo CD stored: the cluster registered once with
// Enforcement's labels, one AppProject per cluster as the declarative mode renders it, and
// Applications named <cluster>-<enforcement> with the cluster_name label; an edit updates the
// Application in place; uninstalls delete without cascade and unregister the cluster once its
// last Application is gone, leaving the other cluster alone.
func TestAPIModeWritesWhatDeclarativeModeWrites(t *testing.T) {
	h := newHarness(t, withArgoAPI(time.Second, nil))
	h.consume()
	urls := kubeURLs(t)
	agent := h.apiIntent("baseline", "prod-a", "agent", urls[0])
	ingress := h.apiIntent("baseline", "prod-a", "ingress", urls[0])
	other := h.apiIntent("baseline", "prod-b", "agent", urls[1])
	h.publish(agent, ingress, other)
	for _, in := range []*events.InstallIntent{agent, ingress, other} {
		s := h.outcome(func(e events.Event) bool { return succeeded(in.ID())(e) || failed(in.ID())(e) })
		if ok, _ := s.(*events.InstallSucceeded); ok == nil || !ok.Created {
			t.Fatalf("install %s: %+v, want a creation", in.ID(), s)
		}
	}

	// The cluster Secrets Argo CD keeps: one per cluster, with Enforcement's labels.
	secrets, err := h.kube.CoreV1().Secrets(h.ns).List(context.Background(), metav1.ListOptions{LabelSelector: LabelSecretType + "=" + SecretTypeCluster})
	if err != nil {
		t.Fatal(err)
	}
	registered := map[string]string{}
	for _, s := range secrets.Items {
		if s.Labels[LabelManagedBy] != ManagedByValue || s.Labels[LabelCluster] != string(s.Data["name"]) {
			t.Errorf("cluster Secret %s: labels %v, want Enforcement's and cluster_name %s", s.Name, s.Labels, s.Data["name"])
		}
		registered[string(s.Data["name"])] = string(s.Data["server"])
	}
	if len(registered) != 2 || registered["prod-a"] != urls[0] || registered["prod-b"] != urls[1] {
		t.Fatalf("clusters registered in Argo CD: %v, want prod-a at %s and prod-b at %s", registered, urls[0], urls[1])
	}

	// The AppProject and Applications, as the declarative mode renders them.
	names := h.syncer.names("prod-a", "agent")
	p := h.project("prod-a")
	want := RenderProject(h.ns, names, "prod-a", urls[0], []string{agent.Enforcement.Repo, ingress.Enforcement.Repo}, ProjectSettings{ClusterResources: true})
	if p == nil || !owned(p) || !covers(p.Spec, want.Spec) {
		t.Fatalf("AppProject prod-a: %+v, want %+v", p, want.Spec)
	}
	for _, in := range []*events.InstallIntent{agent, ingress, other} {
		name := events.ApplicationName(in.Cluster.Name, in.Enforcement.Name)
		app := h.app(name)
		desired := RenderApplication(h.ns, in, h.syncer.names(in.Cluster.Name, in.Enforcement.Name))
		if app == nil || app.Labels[LabelCluster] != in.Cluster.Name || !inSync(app.Labels, app.Annotations, app.Spec, desired) {
			t.Fatalf("Application %s: %+v, want as rendered", name, app)
		}
	}

	// An edit updates the Application in place.
	edited := h.apiIntent("baseline", "prod-a", "agent", urls[0])
	edited.Enforcement.TargetRevision, edited.SpecHash = "v2", "h2"
	h.publish(edited)
	if s := h.outcome(succeeded(edited.ID())).(*events.InstallSucceeded); s.Created {
		t.Errorf("the edit reported a creation")
	}
	if app := h.app("prod-a-agent"); app.Spec.Source.TargetRevision != "v2" {
		t.Errorf("Application after the edit: targetRevision %s, want v2", app.Spec.Source.TargetRevision)
	}

	// Uninstalls: prod-a stays registered while one Application is left, then goes; prod-b stays.
	h.publish(uninstallIntent(edited, "RuleDeleted"))
	h.outcome(uninstalled(uninstallIntent(edited, "RuleDeleted").ID()))
	if h.app("prod-a-agent") != nil || h.project("prod-a") == nil {
		t.Fatalf("after the first uninstall: Application prod-a-agent %v, AppProject prod-a %v; want gone, kept", h.app("prod-a-agent") != nil, h.project("prod-a") != nil)
	}
	h.publish(uninstallIntent(ingress, "RuleDeleted"))
	if done := h.outcome(uninstalled(uninstallIntent(ingress, "RuleDeleted").ID())).(*events.UninstallDone); !done.Deleted {
		t.Errorf("second uninstall deleted nothing")
	}
	eventually(t, "prod-a unregistered, prod-b kept", func() bool {
		list, err := h.kube.CoreV1().Secrets(h.ns).List(context.Background(), metav1.ListOptions{LabelSelector: LabelSecretType + "=" + SecretTypeCluster})
		if err != nil || len(list.Items) != 1 {
			return false
		}
		return string(list.Items[0].Data["name"]) == "prod-b" && h.project("prod-a") == nil && h.project("prod-b") != nil && h.app("prod-b-agent") != nil
	})
	// No cascade by default: Argo CD was never asked to delete the workloads.
	if n := h.requests("ApplicationService.Delete"); n != 2 {
		t.Errorf("Application deletes sent: %d, want 2", n)
	}
}

// TestAPIModeReadsAreBatched counts the requests a burst costs in API mode: each cluster is
// registered once and its project read once, every Application is one create, and no
// Application is read one by one: decisions come from the watched cache. A redelivered batch
// costs no request at all.
func TestAPIModeReadsAreBatched(t *testing.T) {
	h := newHarness(t, withArgoAPI(time.Second, nil))
	h.consume()
	urls := kubeURLs(t)
	var batch []*events.InstallIntent
	for i := range 10 {
		for c, cluster := range []string{"east", "west"} {
			batch = append(batch, h.apiIntent("baseline", cluster, "pkg-"+string(rune('a'+i)), urls[c]))
		}
	}
	start := map[string]int{}
	methods := []string{"ApplicationService.Get", "ApplicationService.List", "ApplicationService.Create", "ApplicationService.Update",
		"ProjectService.Get", "ProjectService.Create", "ProjectService.Update", "ClusterService.Create", "ClusterService.Get", "ClusterService.Update"}
	for _, m := range methods {
		start[m] = h.requests(m)
	}
	for _, in := range batch {
		h.publish(in)
	}
	for _, in := range batch {
		h.outcome(succeeded(in.ID()))
	}
	got := map[string]int{}
	for _, m := range methods {
		if n := h.requests(m) - start[m]; n > 0 {
			got[m] = n
		}
	}
	t.Logf("requests for 20 Applications on 2 clusters: %v", got)
	// Each cluster's project is created once and then only grows by a repository per package:
	// a read and an update each time (Argo CD's upsert would not write the annotations).
	want := map[string]int{"ClusterService.Create": 2, "ApplicationService.Create": 20, "ProjectService.Get": 20, "ProjectService.Create": 2, "ProjectService.Update": 18}
	for m, n := range want {
		if got[m] != n {
			t.Errorf("%s: %d requests, want %d (all: %v)", m, got[m], n, got)
		}
	}
	for _, m := range []string{"ApplicationService.Get", "ApplicationService.List", "ClusterService.Get"} {
		if got[m] != 0 {
			t.Errorf("%s: %d requests, want none (all: %v)", m, got[m], got)
		}
	}

	// A redelivery of the whole batch reads and writes nothing.
	before := map[string]int{}
	for _, m := range methods {
		before[m] = h.requests(m)
	}
	for _, in := range batch {
		h.handle(in)
	}
	for _, m := range methods {
		if n := h.requests(m) - before[m]; n != 0 {
			t.Errorf("redelivered batch: %d %s requests, want none", n, m)
		}
	}
}

// TestAPIModeRenewsAnExpiredSession shortens Argo CD's session to a few seconds: an install
// after the token expired logs in again and succeeds.
func TestAPIModeRenewsAnExpiredSession(t *testing.T) {
	h := newHarness(t, withArgoAPI(time.Hour, nil))
	ctx := context.Background()
	cm, err := h.kube.CoreV1().ConfigMaps(h.ns).Get(ctx, "argocd-cm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["users.session.duration"] = "3s"
	if _, err := h.kube.CoreV1().ConfigMaps(h.ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.session.Close() // the next call logs in under the short duration
	time.Sleep(time.Second)
	h.consume()
	urls := kubeURLs(t)
	first := h.apiIntent("baseline", "prod-a", "agent", urls[0])
	h.publish(first)
	h.outcome(succeeded(first.ID()))
	logins := testutil.ToFloat64(h.metrics.argocdLogins.WithLabelValues("ok"))
	time.Sleep(4 * time.Second)
	second := h.apiIntent("baseline", "prod-a", "ingress", urls[0])
	h.publish(second)
	h.outcome(succeeded(second.ID()))
	if renewed := testutil.ToFloat64(h.metrics.argocdLogins.WithLabelValues("ok")); renewed != logins+1 {
		t.Errorf("log-ins: %v before the session expired, %v after; want one more", logins, renewed)
	}
	if n := testutil.ToFloat64(h.metrics.argocdRequests.WithLabelValues("ApplicationService.Create", "Unauthenticated")) +
		testutil.ToFloat64(h.metrics.argocdRequests.WithLabelValues("ProjectService.Get", "Unauthenticated")); n == 0 {
		t.Error("no request was refused as Unauthenticated: the session did not expire")
	}
}

// TestAPIModeWaitsForArgoCD starts with Argo CD's API unreachable: the install fails as
// retryable, with a message that names Argo CD's API, and /readyz's check says so; once the API
// answers, the same intent is installed and the check passes.
func TestAPIModeWaitsForArgoCD(t *testing.T) {
	var proxy *testenv.TCPProxy
	h := newHarness(t, withArgoAPI(time.Second, &proxy))
	proxy.Close()
	h.session.Close() // what comes next connects again, and finds nothing
	h.consumeWith(h.handler.Handle, 20)
	in := h.apiIntent("baseline", "prod-a", "agent", kubeURLs(t)[0])
	h.publish(in)
	f := h.outcome(failed(in.ID())).(*events.InstallFailed)
	if f.Permanent || !strings.Contains(f.Message, "Argo CD API at http://"+proxy.Addr()) {
		t.Fatalf("install while Argo CD is unreachable: %+v, want a retried failure naming Argo CD's API", f)
	}
	if err := h.session.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "Argo CD API at") {
		t.Errorf("readiness while Argo CD is unreachable: %v", err)
	}
	proxy.Open()
	h.outcome(succeeded(in.ID()))
	if err := h.session.Ready(context.Background()); err != nil {
		t.Errorf("readiness after Argo CD came back: %v", err)
	}
	if h.app("prod-a-agent") == nil {
		t.Error("no Application after Argo CD came back")
	}
}

// TestAPIModeWrongPassword: a refused log-in is a clear error, and the readiness check says so.
func TestAPIModeWrongPassword(t *testing.T) {
	kube := testenv.SharedKube(t)
	argocd := testenv.StartArgoCD(t, kube, kube.Namespace(t, "argocd-wrong-password"))
	session, err := newArgoSession(ArgoAPIConfig{URL: argocd.URL, Username: testenv.ArgoCDAdmin, Password: "not-" + argocd.Password, PollInterval: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	apps, _ := argoAPIClients(session, argocd.Namespace, time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	_, err = apps.ArgoprojV1alpha1().Applications(argocd.Namespace).List(context.Background(), metav1.ListOptions{})
	want := "log in to Argo CD at " + argocd.URL + " as admin (ARGO_USERNAME, ARGO_PASSWORD): refused"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("list with a wrong password: %v, want %q", err, want)
	}
	if err := session.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("readiness with a wrong password: %v, want %q", err, want)
	}
}

// TestAPIModeAdoptsTheOriginalsObjects registers a cluster, its AppProject and an Application
// through Argo CD's API exactly as the original operator did, then installs the same package:
// the cluster is not registered again, the project and the Application are adopted (labelled,
// recorded) and updated in place. A Cascade uninstall then asks Argo CD for a cascading delete.
func TestAPIModeAdoptsTheOriginalsObjects(t *testing.T) {
	h := newHarness(t, withArgoAPI(time.Second, nil))
	ctx := context.Background()
	url := kubeURLs(t)[0]
	token, err := argoLogin(ctx, h.argocd.URL, testenv.ArgoCDAdmin, h.argocd.Password)
	if err != nil {
		t.Fatal(err)
	}
	original := argoAPIClient(t, h.argocd.Addr, token)
	closer, clusters, err := original.NewClusterClient()
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	kube := testenv.SharedKube(t)
	if _, err := clusters.Create(ctx, &clusterpkg.ClusterCreateRequest{Cluster: &argov1.Cluster{Name: "prod-a", Server: url,
		Config: argov1.ClusterConfig{TLSClientConfig: argov1.TLSClientConfig{CAData: kube.Config.CAData, CertData: kube.Config.CertData, KeyData: kube.Config.KeyData}}}}); err != nil {
		t.Fatal(err)
	}
	closer, projects, err := original.NewProjectClient()
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	if _, err := projects.Create(ctx, &projectpkg.ProjectCreateRequest{Project: &argov1.AppProject{
		ObjectMeta: metav1.ObjectMeta{Name: "prod-a"},
		Spec:       argov1.AppProjectSpec{SourceRepos: []string{"*"}, Destinations: []argov1.ApplicationDestination{{Server: url, Namespace: "*"}}},
	}}); err != nil {
		t.Fatal(err)
	}
	in := h.apiIntent("baseline", "prod-a", "agent", url)
	in.DeletionPolicy = events.DeletionCascade
	closer, apps, err := original.NewApplicationClient()
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	if _, err := apps.Create(ctx, &applicationpkg.ApplicationCreateRequest{Validate: ptr(false), Application: &argov1.Application{
		ObjectMeta: metav1.ObjectMeta{Name: "prod-a-agent", Labels: map[string]string{LabelCluster: "prod-a"}},
		Spec: argov1.ApplicationSpec{
			Source:      &argov1.ApplicationSource{RepoURL: in.Enforcement.Repo, Path: in.Enforcement.Path, TargetRevision: "v0"},
			Destination: argov1.ApplicationDestination{Name: "prod-a", Namespace: "monitoring"},
			SyncPolicy:  &argov1.SyncPolicy{Automated: &argov1.SyncPolicyAutomated{Prune: true, SelfHeal: true}},
		},
	}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Syncer's caches show the original's objects", func() bool {
		_, app, _ := h.syncer.apps.get("prod-a-agent")
		_, project, _ := h.syncer.projects.get("prod-a")
		return app && project && len(h.syncer.secrets.list(indexServer, url)) == 1
	})

	h.consume()
	h.publish(in)
	if s := h.outcome(func(e events.Event) bool { return succeeded(in.ID())(e) || failed(in.ID())(e) }); s.Type() != (&events.InstallSucceeded{}).Type() {
		t.Fatalf("install over the original's objects: %+v", s)
	}
	app, p := h.app("prod-a-agent"), h.project("prod-a")
	if !owned(app) || app.Annotations[AnnotationAdoptedFrom] != OriginOriginalOperator || app.Spec.Project != "prod-a" || app.Spec.Source.TargetRevision != "v1" {
		t.Errorf("Application after the install: labels %v, annotations %v, project %s, revision %s; want adopted, in prod-a, at v1",
			app.Labels, app.Annotations, app.Spec.Project, app.Spec.Source.TargetRevision)
	}
	if !owned(p) || p.Annotations[AnnotationAdoptedFrom] != OriginOriginalOperator {
		t.Errorf("AppProject after the install: labels %v, annotations %v; want adopted", p.Labels, p.Annotations)
	}
	secrets, err := h.kube.CoreV1().Secrets(h.ns).List(ctx, metav1.ListOptions{LabelSelector: LabelSecretType + "=" + SecretTypeCluster})
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 1 || owned(&secrets.Items[0]) {
		t.Errorf("cluster Secrets: %d (Enforcement's: %v), want the original's only, untouched", len(secrets.Items), len(secrets.Items) == 1 && owned(&secrets.Items[0]))
	}

	// Cascade: Argo CD is asked to delete the workload; with no application controller here the
	// Application stays, terminating with its finalizer, and the cluster stays registered.
	un := uninstallIntent(in, "RuleDeleted")
	h.publish(un)
	h.outcome(uninstalled(un.ID()))
	app = h.app("prod-a-agent")
	if app == nil || app.DeletionTimestamp == nil || !slices.Contains(app.Finalizers, argov1.ResourcesFinalizerName) {
		t.Fatalf("Application after a Cascade uninstall: %+v, want terminating with %s", app, argov1.ResourcesFinalizerName)
	}
	if h.project("prod-a") == nil {
		t.Error("AppProject deleted while its Application is still being deleted")
	}
}

// TestAPIErrorsAreClassified: Argo CD's refusals, in the form argocd-server v2.14 sends them,
// become the Kubernetes API errors the Syncer classifies. A refusal that only says that
// argocd-server's cache lags behind a cluster or project argo-syncer wrote a moment ago is
// retried; a spec Argo CD rejects for good is not.
func TestAPIErrorsAreClassified(t *testing.T) {
	for _, tt := range []struct {
		code  codes.Code
		msg   string
		check func(error) bool
	}{
		{codes.InvalidArgument, "application spec for west-pkg-h is invalid: InvalidSpecError: application repo https://git.example/pkg-h is not permitted in project 'west'", apierrors.IsServiceUnavailable},
		{codes.InvalidArgument, "application spec for west-web is invalid: InvalidSpecError: application destination server 'https://west' and namespace 'team-a-web' do not match any of the allowed destinations in project 'west'", apierrors.IsServiceUnavailable},
		{codes.InvalidArgument, "application spec for west-web is invalid: InvalidSpecError: unable to find destination server: there are no clusters with this name: west", apierrors.IsServiceUnavailable},
		{codes.InvalidArgument, "application spec for west-web is invalid: InvalidSpecError: Unable to generate manifests: helm parameter must not be empty", apierrors.IsBadRequest},
		{codes.InvalidArgument, "existing application spec is different, use upsert flag to force update", apierrors.IsAlreadyExists},
		{codes.NotFound, "applications.argoproj.io \"west-web\" not found", apierrors.IsNotFound},
		{codes.PermissionDenied, "permission denied: applications, create, west/west-web", apierrors.IsForbidden},
		{codes.Unavailable, "connection refused", apierrors.IsServiceUnavailable},
	} {
		err := kubeError(status.Error(tt.code, tt.msg), "applications", "west-web", "https://argocd.example")
		if !tt.check(err) {
			t.Errorf("%s %q became %T %v", tt.code, tt.msg, err, err)
		}
	}
}
