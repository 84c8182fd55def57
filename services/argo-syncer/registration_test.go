package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// testCA is a PEM certificate block and its base64, the form of a cloud API's CA field and of
// Argo CD's tlsClientConfig.caData.
var (
	testCAPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not a real certificate")})
	testCAB64 = base64.StdEncoding.EncodeToString(testCAPEM)
)

// eksIntent is an install intent for an EKS cluster as rule-engine emits it: the source has no
// Secret (the SDK's default chain), the registration hints come from the cluster's attributes.
func (h *harness) eksIntent(cluster string) *events.InstallIntent {
	in := h.installIntent("baseline", cluster, "agent")
	in.Cluster.Source = events.SourceRef{Kind: KindEKS, ID: "eks1"}
	in.Cluster.URL = "https://" + strings.ToUpper(cluster) + ".gr7.eu-west-1.eks.amazonaws.com"
	in.Cluster.Registration = map[string]string{
		HintAWSClusterName: "My_EKS." + cluster, // the AWS name, not the normalised one
		HintAWSRoleARN:     "arn:aws:iam::123456789012:role/argocd-deployer",
		HintCAData:         testCAB64,
	}
	return in
}

func (h *harness) gkeIntent(cluster string) *events.InstallIntent {
	in := h.installIntent("baseline", cluster, "agent")
	in.Cluster.Source = events.SourceRef{Kind: KindGKE, ID: "gke1", SecretNamespace: h.opNS, SecretName: "gke"}
	in.Cluster.URL = "https://34.1.2.3"
	in.Cluster.Registration = map[string]string{
		HintExecCommand:    "argocd-k8s-auth",
		HintExecArgs:       `["gcp"]`,
		HintExecAPIVersion: "client.authentication.k8s.io/v1beta1",
		HintCAData:         testCAB64,
	}
	return in
}

func (h *harness) ocmIntent(cluster string) *events.InstallIntent {
	in := h.installIntent("baseline", cluster, "agent")
	in.Cluster.Source = events.SourceRef{Kind: KindOCM, ID: "ocm1", SecretNamespace: h.opNS, SecretName: "ocm"}
	return in
}

// clusterConfigJSON returns the decoded config of a cluster Secret, failing when it is missing.
func (h *harness) clusterConfigJSON(cluster string) map[string]any {
	h.t.Helper()
	sec := h.secret(ClusterSecretName(cluster))
	if sec == nil {
		h.t.Fatalf("no cluster secret for %s", cluster)
	}
	if string(sec.Data["name"]) != cluster || len(sec.Data) != 3 || sec.Labels[LabelSecretType] != SecretTypeCluster {
		h.t.Errorf("cluster secret name=%q, %d keys, labels %v", sec.Data["name"], len(sec.Data), sec.Labels)
	}
	var cfg map[string]any
	if err := json.Unmarshal(sec.Data["config"], &cfg); err != nil {
		h.t.Fatalf("config is not JSON: %v", err)
	}
	return cfg
}

// secretReads counts the GETs of Secrets in the operator namespace since mark.
func (h *harness) secretReads(mark int) int {
	n := 0
	for _, r := range h.log.since(mark) {
		if r.Method == http.MethodGet && !r.Watch && strings.HasPrefix(r.Path, "/api/v1/namespaces/"+h.opNS+"/secrets") {
			n++
		}
	}
	return n
}

// TestRegistersEKSClusterWithAWSAuthConfig: an EKS intent with no source Secret registers the
// cluster in Argo CD's documented awsAuthConfig format, from the hints alone.
func TestRegistersEKSClusterWithAWSAuthConfig(t *testing.T) {
	h := newHarness(t)
	h.consume()
	in := h.eksIntent("eks-prod")
	mark := h.log.mark()
	h.publish(in)
	h.outcome(succeeded(in.ID()))

	want := map[string]any{
		"awsAuthConfig": map[string]any{
			"clusterName": "My_EKS.eks-prod",
			"roleARN":     "arn:aws:iam::123456789012:role/argocd-deployer",
		},
		"tlsClientConfig": map[string]any{"insecure": false, "caData": testCAB64},
	}
	if got := h.clusterConfigJSON("eks-prod"); !reflect.DeepEqual(got, want) {
		t.Errorf("config\n got %v\nwant %v", got, want)
	}
	if sec := h.secret(ClusterSecretName("eks-prod")); string(sec.Data["server"]) != in.Cluster.URL {
		t.Errorf("server %q", sec.Data["server"])
	}
	if n := h.secretReads(mark); n != 0 {
		t.Errorf("%d source Secret reads; EKS registration reads no credentials", n)
	}
	if h.app("eks-prod-agent") == nil || h.project("eks-prod") == nil {
		t.Error("Application or AppProject missing")
	}

	// Without a role ARN (the Secret had none), the key is absent rather than empty.
	noRole := h.eksIntent("eks-dev")
	delete(noRole.Cluster.Registration, HintAWSRoleARN)
	h.publish(noRole)
	h.outcome(succeeded(noRole.ID()))
	aws := h.clusterConfigJSON("eks-dev")["awsAuthConfig"].(map[string]any)
	if !reflect.DeepEqual(aws, map[string]any{"clusterName": "My_EKS.eks-dev"}) {
		t.Errorf("awsAuthConfig without role %v", aws)
	}
}

// TestRegistersGKEClusterWithExecProvider: a GKE intent registers the cluster in Argo CD's
// documented execProviderConfig format (argocd-k8s-auth gcp); the source Secret is not read,
// even though the intent names one that does not exist.
func TestRegistersGKEClusterWithExecProvider(t *testing.T) {
	h := newHarness(t)
	h.consume()
	in := h.gkeIntent("gke-prod")
	mark := h.log.mark()
	h.publish(in)
	h.outcome(succeeded(in.ID()))
	want := map[string]any{
		"execProviderConfig": map[string]any{
			"command":    "argocd-k8s-auth",
			"args":       []any{"gcp"},
			"apiVersion": "client.authentication.k8s.io/v1beta1",
		},
		"tlsClientConfig": map[string]any{"insecure": false, "caData": testCAB64},
	}
	if got := h.clusterConfigJSON("gke-prod"); !reflect.DeepEqual(got, want) {
		t.Errorf("config\n got %v\nwant %v", got, want)
	}
	if n := h.secretReads(mark); n != 0 {
		t.Errorf("%d source Secret reads; GKE registration reads no credentials", n)
	}
}

// TestRegistersAKSClusterWithWorkloadIdentity: an AKS intent (no source Secret read) registers
// the cluster as Argo CD documents AKS with workload identity: argocd-k8s-auth azure with
// AAD_LOGIN_METHOD=workloadidentity, and the CA the scanner fetched.
func TestRegistersAKSClusterWithWorkloadIdentity(t *testing.T) {
	h := newHarness(t)
	h.consume()
	in := h.installIntent("baseline", "aks-prod", "agent")
	in.Cluster.Source = events.SourceRef{Kind: KindAKS, ID: "aks1", SecretNamespace: h.opNS, SecretName: "aks"}
	in.Cluster.URL = "https://aks-prod-dns-1a2b3c4d.hcp.westeurope.azmk8s.io"
	in.Cluster.Registration = map[string]string{
		HintExecCommand:    "argocd-k8s-auth",
		HintExecArgs:       `["azure"]`,
		HintExecEnv:        `{"AAD_LOGIN_METHOD":"workloadidentity"}`,
		HintExecAPIVersion: "client.authentication.k8s.io/v1beta1",
		HintCAData:         testCAB64,
	}
	mark := h.log.mark()
	h.publish(in)
	h.outcome(succeeded(in.ID()))
	want := map[string]any{
		"execProviderConfig": map[string]any{
			"command":    "argocd-k8s-auth",
			"args":       []any{"azure"},
			"env":        map[string]any{"AAD_LOGIN_METHOD": "workloadidentity"},
			"apiVersion": "client.authentication.k8s.io/v1beta1",
		},
		"tlsClientConfig": map[string]any{"insecure": false, "caData": testCAB64},
	}
	if got := h.clusterConfigJSON("aks-prod"); !reflect.DeepEqual(got, want) {
		t.Errorf("config\n got %v\nwant %v", got, want)
	}
	if n := h.secretReads(mark); n != 0 {
		t.Errorf("%d source Secret reads; AKS registration reads no credentials", n)
	}
}

// TestRegistersOCMClusterFromItsCredentialsSecret: an OCM intent takes the bearer token and CA
// from the cluster's own Secret ocm-<cluster> (keys as the managed-serviceaccount add-on writes
// them), not from the source Secret.
func TestRegistersOCMClusterFromItsCredentialsSecret(t *testing.T) {
	h := newHarness(t)
	h.consume()
	_, err := h.kube.CoreV1().Secrets(h.opNS).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "ocm-spoke-1", Namespace: h.opNS},
		Data:       map[string][]byte{"token": []byte("msa-t0ken\n"), "ca.crt": testCAPEM},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in := h.ocmIntent("spoke-1")
	h.publish(in)
	h.outcome(succeeded(in.ID()))
	want := map[string]any{
		"bearerToken":     "msa-t0ken",
		"tlsClientConfig": map[string]any{"insecure": false, "caData": testCAB64},
	}
	if got := h.clusterConfigJSON("spoke-1"); !reflect.DeepEqual(got, want) {
		t.Errorf("config\n got %v\nwant %v", got, want)
	}
}

// TestBadRegistrationIsAClearFailure: unusable hints are a permanent InstallFailed naming the
// hint; a missing or token-less OCM credentials Secret is a retried InstallFailed naming the
// Secret; nothing is written for them, and the other intents carry on.
func TestBadRegistrationIsAClearFailure(t *testing.T) {
	h := newHarness(t)
	h.consume()
	ctx := context.Background()
	noName := h.eksIntent("eks-noname")
	delete(noName.Cluster.Registration, HintAWSClusterName)
	noHints := h.eksIntent("eks-nohints")
	noHints.Cluster.Registration = nil
	badCA := h.gkeIntent("gke-badca")
	badCA.Cluster.Registration[HintCAData] = "not base64!"
	badArgs := h.gkeIntent("gke-badargs")
	badArgs.Cluster.Registration[HintExecArgs] = `["gcp",`
	noSecret := h.ocmIntent("spoke-nosecret")
	if _, err := h.kube.CoreV1().Secrets(h.opNS).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "ocm-spoke-notoken", Namespace: h.opNS},
		Data:       map[string][]byte{"ca.crt": testCAPEM},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	noToken := h.ocmIntent("spoke-notoken")
	good := h.eksIntent("eks-good")
	h.publish(noName, noHints, badCA, badArgs, noSecret, noToken, good)

	for _, c := range []struct {
		in        *events.InstallIntent
		reason    string
		permanent bool
		mentions  []string
	}{
		{noName, ReasonRegistrationInvalid, true, []string{HintAWSClusterName}},
		{noHints, ReasonRegistrationInvalid, true, []string{HintAWSClusterName, HintCAData}},
		{badCA, ReasonRegistrationInvalid, true, []string{HintCAData, "base64 of a PEM"}},
		{badArgs, ReasonRegistrationInvalid, true, []string{HintExecArgs, "JSON array"}},
		{noSecret, ReasonSecretInvalid, false, []string{h.opNS + "/ocm-spoke-nosecret", "not found"}},
		{noToken, ReasonSecretInvalid, false, []string{"ocm-spoke-notoken", `key "token" is missing`}},
	} {
		f := h.outcome(failed(c.in.ID())).(*events.InstallFailed)
		if f.Reason != c.reason || f.Permanent != c.permanent || f.Cluster != c.in.Cluster.Name {
			t.Errorf("%s: install failed %+v, want reason %s permanent %v", c.in.Cluster.Name, f, c.reason, c.permanent)
		}
		for _, m := range c.mentions {
			if !strings.Contains(f.Message, m) {
				t.Errorf("%s: message %q does not mention %q", c.in.Cluster.Name, f.Message, m)
			}
		}
		if h.secret(ClusterSecretName(c.in.Cluster.Name)) != nil || h.project(c.in.Cluster.Name) != nil || h.app(events.ApplicationName(c.in.Cluster.Name, "agent")) != nil {
			t.Errorf("%s: objects written despite the failure", c.in.Cluster.Name)
		}
	}
	h.outcome(succeeded(good.ID()))
	if h.secret(ClusterSecretName("eks-good")) == nil {
		t.Error("the good intent's cluster was not registered")
	}
	// Permanent failures are acknowledged: no retry publishes them again.
	h.noOutcome(300*time.Millisecond, func(e events.Event) bool {
		f, ok := e.(*events.InstallFailed)
		return ok && (f.IntentID == noName.ID() || f.IntentID == badCA.ID())
	})
}

// TestClusterRegisteredOtherwiseGetsNoSecret: a cluster that a cluster Secret of someone else's
// registers already, by its API URL or by its name, gets its Applications and no Secret of
// Enforcement's. Two Secrets register one URL: the cluster stays registered while one of them is
// left, and gets Enforcement's own Secret once both are gone.
func TestClusterRegisteredOtherwiseGetsNoSecret(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	secrets := h.kube.CoreV1().Secrets(h.ns)
	foreign := func(name, server, cluster string) {
		t.Helper()
		_, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelSecretType: SecretTypeCluster}},
			StringData: map[string]string{"server": server, "name": cluster, "config": "{}"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	byURL, byName := h.installIntent("baseline", "by-url", "agent"), h.installIntent("baseline", "by-name", "agent")
	foreign("registered-by-hand", byURL.Cluster.URL, "hand-made")
	foreign("registered-by-another-tool", byURL.Cluster.URL, "another-name")
	foreign("registered-by-name", "https://elsewhere.example:6443", "by-name")
	h.cacheSees("the three foreign cluster Secrets", func(s *Syncer) bool {
		return len(s.secrets.list(indexServer, byURL.Cluster.URL)) == 2 && len(s.secrets.list(indexName, "by-name")) == 1
	})
	install := func(in *events.InstallIntent) {
		t.Helper()
		if _, err := h.syncer.Install(ctx, in, true); err != nil {
			t.Fatal(err)
		}
		if h.app(in.Cluster.Name+"-"+in.Enforcement.Name) == nil {
			t.Errorf("no Application for %s", in.Cluster.Name)
		}
	}
	install(byURL)
	install(byName)
	for _, name := range []string{"cluster-by-url", "cluster-by-name"} {
		if _, err := secrets.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Enforcement's Secret %s for a cluster registered otherwise: %v", name, err)
		}
	}

	if err := secrets.Delete(ctx, "registered-by-hand", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.cacheSees("one of the two Secrets of the URL gone", func(s *Syncer) bool {
		return len(s.secrets.list(indexServer, byURL.Cluster.URL)) == 1
	})
	install(h.installIntent("baseline", "by-url", "logging"))
	if _, err := secrets.Get(ctx, "cluster-by-url", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Enforcement's Secret while another Secret still registers the URL: %v", err)
	}
	if err := secrets.Delete(ctx, "registered-by-another-tool", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.cacheSees("both Secrets of the URL gone", func(s *Syncer) bool {
		return len(s.secrets.list(indexServer, byURL.Cluster.URL)) == 0
	})
	install(h.installIntent("baseline", "by-url", "policies"))
	if sec := h.secret("cluster-by-url"); sec == nil || string(sec.Data["server"]) != byURL.Cluster.URL {
		t.Errorf("no Secret of Enforcement's for the cluster once nothing else registers it: %v", sec)
	}
}
