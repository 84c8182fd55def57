package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-cd/v2/pkg/apiclient"
	applicationpkg "github.com/argoproj/argo-cd/v2/pkg/apiclient/application"
	clusterpkg "github.com/argoproj/argo-cd/v2/pkg/apiclient/cluster"
	projectpkg "github.com/argoproj/argo-cd/v2/pkg/apiclient/project"
	argov1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	argoclient "github.com/argoproj/argo-cd/v2/pkg/client/clientset/versioned"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// TestArgoCDServerServesWhatAPIModeNeeds runs a real argocd-server (testenv.StartArgoCD) and
// goes through everything the Argo CD API mode will do, with Argo CD's own Go client: log in as
// admin with POST /api/v1/session (as the original operator did with ARGO_USERNAME and
// ARGO_PASSWORD), register the test API server itself as a cluster, create an AppProject and an
// Application, list Applications by label selector, delete the Application. It checks each step
// in the API server's objects too, so the Argo CD API is proven to write what argo-syncer's
// direct mode writes: a cluster Secret, an AppProject, an Application in ARGOCD_NAMESPACE.
func TestArgoCDServerServesWhatAPIModeNeeds(t *testing.T) {
	kube := testenv.SharedKube(t)
	argo := testenv.StartArgoCD(t, kube, "argocd-api")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if _, err := argoLogin(ctx, argo.URL, testenv.ArgoCDAdmin, "wrong-"+argo.Password); err == nil {
		t.Fatal("login with a wrong password succeeded")
	}
	token, err := argoLogin(ctx, argo.URL, testenv.ArgoCDAdmin, argo.Password)
	if err != nil {
		t.Fatal(err)
	}
	anonymous := argoAPIClient(t, argo.Addr, "")
	closer, anonymousClusters, err := anonymous.NewClusterClient()
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	if _, err := anonymousClusters.List(ctx, &clusterpkg.ClusterQuery{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("listing clusters without a token: %v, want Unauthenticated", err)
	}
	api := argoAPIClient(t, argo.Addr, token)

	// The cluster: the test API server itself, with the client certificate of its kubeconfig.
	// Create connects to it (it asks the server version) before it stores the Secret.
	closer, clusters, err := api.NewClusterClient()
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	server := strings.TrimSuffix(kube.Config.Host, "/") // Argo CD keeps cluster URLs without it
	cluster, err := clusters.Create(ctx, &clusterpkg.ClusterCreateRequest{Cluster: &argov1.Cluster{
		Name:   "test-kube",
		Server: server,
		Config: argov1.ClusterConfig{TLSClientConfig: argov1.TLSClientConfig{
			CAData: kube.Config.CAData, CertData: kube.Config.CertData, KeyData: kube.Config.KeyData,
		}},
	}})
	if err != nil {
		t.Fatalf("register the cluster: %v", err)
	}
	if cluster.Server != server || cluster.Name != "test-kube" {
		t.Errorf("registered cluster %q at %q, want test-kube at %s", cluster.Name, cluster.Server, server)
	}
	// The version Create asked the cluster for is kept in redis, with the connection state.
	got, err := clusters.Get(ctx, &clusterpkg.ClusterQuery{Server: server})
	if err != nil {
		t.Fatalf("get the registered cluster: %v", err)
	}
	if got.Info.ServerVersion == "" || got.Info.ConnectionState.Status != argov1.ConnectionStatusSuccessful {
		t.Errorf("registered cluster: version %q, connection %q; want the API server's version, Successful",
			got.Info.ServerVersion, got.Info.ConnectionState.Status)
	}
	core, err := kubernetes.NewForConfig(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := core.CoreV1().Secrets(argo.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "argocd.argoproj.io/secret-type=cluster"})
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 1 || string(secretValue(secrets.Items[0], "server")) != server {
		t.Fatalf("cluster Secrets after the registration: %d, want one for %s", len(secrets.Items), server)
	}

	closer, projects, err := api.NewProjectClient()
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	_, err = projects.Create(ctx, &projectpkg.ProjectCreateRequest{Project: &argov1.AppProject{
		ObjectMeta: metav1.ObjectMeta{Name: "test-kube"},
		Spec: argov1.AppProjectSpec{
			SourceRepos:  []string{"*"},
			Destinations: []argov1.ApplicationDestination{{Server: server, Namespace: "*"}},
		},
	}})
	if err != nil {
		t.Fatalf("create the AppProject: %v", err)
	}

	closer, apps, err := api.NewApplicationClient()
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	app := &argov1.Application{
		ObjectMeta: metav1.ObjectMeta{Name: "test-kube-guestbook", Labels: map[string]string{
			"app.kubernetes.io/managed-by": "enforcement", "cluster_name": "test-kube",
		}},
		Spec: argov1.ApplicationSpec{
			Project:     "test-kube",
			Source:      &argov1.ApplicationSource{RepoURL: "https://example.invalid/guestbook.git", Path: "guestbook", TargetRevision: "HEAD"},
			Destination: argov1.ApplicationDestination{Server: server, Namespace: "guestbook"},
		},
	}
	// With validation (the default) Argo CD asks the repo server about the source; none runs.
	start := time.Now()
	_, err = apps.Create(ctx, &applicationpkg.ApplicationCreateRequest{Application: app})
	if err == nil || !strings.Contains(err.Error(), "repo client error") {
		t.Fatalf("create with validation and no repo server: %v, want the repo client's error", err)
	}
	t.Logf("create with validation, no repo server: %v (after %s)", err, time.Since(start).Round(time.Millisecond))
	// Without it the server still checks the project and that the destination is a known cluster.
	created, err := apps.Create(ctx, &applicationpkg.ApplicationCreateRequest{Application: app, Validate: ptr(false)})
	if err != nil {
		t.Fatalf("create the Application without validation: %v", err)
	}
	if created.Namespace != argo.Namespace {
		t.Errorf("Application created in namespace %q, want %s", created.Namespace, argo.Namespace)
	}
	unknown := app.DeepCopy()
	unknown.Name, unknown.Spec.Destination.Server = "nowhere-guestbook", "https://127.0.0.1:1"
	if _, err := apps.Create(ctx, &applicationpkg.ApplicationCreateRequest{Application: unknown, Validate: ptr(false)}); err == nil {
		t.Error("an Application for an unregistered cluster was created")
	}

	list, err := apps.List(ctx, &applicationpkg.ApplicationQuery{Selector: ptr("app.kubernetes.io/managed-by=enforcement,cluster_name=test-kube")})
	if err != nil {
		t.Fatalf("list Applications by label: %v", err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != app.Name || list.Items[0].Spec.Source.RepoURL != app.Spec.Source.RepoURL {
		t.Fatalf("Applications by label: %v, want %s", appNames(list.Items), app.Name)
	}
	if other, err := apps.List(ctx, &applicationpkg.ApplicationQuery{Selector: ptr("cluster_name=another")}); err != nil || len(other.Items) != 0 {
		t.Fatalf("Applications of another cluster: %v, %v; want none", appNames(other.Items), err)
	}

	// No application controller runs to finish a cascading delete (its finalizer would stay):
	// without cascade the server deletes the Application at once.
	if _, err := apps.Delete(ctx, &applicationpkg.ApplicationDeleteRequest{Name: ptr(app.Name), Cascade: ptr(false)}); err != nil {
		t.Fatalf("delete the Application: %v", err)
	}
	argoObjects, err := argoclient.NewForConfig(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		_, err := argoObjects.ArgoprojV1alpha1().Applications(argo.Namespace).Get(ctx, app.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("read Application %s after the delete: %w", app.Name, err)
		}
		return fmt.Errorf("Application %s still there after the delete", app.Name)
	})
	if _, err := argoObjects.ArgoprojV1alpha1().AppProjects(argo.Namespace).Get(ctx, "test-kube", metav1.GetOptions{}); err != nil {
		t.Errorf("AppProject test-kube after the Application's delete: %v", err)
	}
}

// argoLogin posts username and password to Argo CD's POST /api/v1/session, the REST login the
// original operator used, and returns the session token.
func argoLogin(ctx context.Context, baseURL, username, password string) (string, error) {
	body, err := json.Marshal(map[string]string{"username": username, "password": password})
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/api/v1/session", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("POST /api/v1/session: %s: %s", resp.Status, data)
	}
	var session struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(data, &session); err != nil {
		return "", fmt.Errorf("POST /api/v1/session: %s: %w", data, err)
	}
	if session.Token == "" {
		return "", fmt.Errorf("POST /api/v1/session: no token in %s", data)
	}
	return session.Token, nil
}

// argoAPIClient is Argo CD's Go API client for the plain-text server at addr, with token.
func argoAPIClient(t *testing.T, addr, token string) apiclient.Client {
	t.Helper()
	// An empty ConfigPath would read the CLI's ~/.config/argocd/config: give it none.
	c, err := apiclient.NewClient(&apiclient.ClientOptions{
		ServerAddr: addr, PlainText: true, AuthToken: token, ConfigPath: t.TempDir() + "/config",
	})
	if err != nil {
		t.Fatalf("Argo CD API client: %v", err)
	}
	return c
}

// secretValue returns key of s, from Data or StringData.
func secretValue(s corev1.Secret, key string) []byte {
	if v, ok := s.Data[key]; ok {
		return v
	}
	return []byte(s.StringData[key])
}

// appNames lists the Applications' names.
func appNames(items []argov1.Application) []string {
	names := make([]string, len(items))
	for i, a := range items {
		names[i] = a.Name
	}
	return names
}
