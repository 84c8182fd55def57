package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// TestThrottledAPIServerLosesNothing runs the service with its shipped defaults (no client-side
// rate limit) against a real API server whose Priority and Fairness gives its user a priority
// level of a few seats that rejects (429) whatever exceeds them: 200 intents published at once
// all end with their Applications, and the throttling metric shows the server did push back.
// With SYNC_CONCURRENCY's default of 128 handlers and a fixed bound on writes, the 429s and their
// Retry-After waits kept the intents from converging within the 10 s; the write window
// (pkg/service) narrows to what the server serves, and they converge in about 4.5 s.
func TestThrottledAPIServerLosesNothing(t *testing.T) {
	const intents = 200
	k := testenv.SharedKube(t)
	k.InstallCRDs(t, testenv.ArgoCDCRDs()...)
	id := nsCounter.Add(1)
	ns := k.Namespace(t, fmt.Sprintf("argocd-%d-throttled", id))
	opNS := k.Namespace(t, fmt.Sprintf("op-%d-throttled", id))
	createSourceSecret(t, k, opNS)
	user := fmt.Sprintf("argo-syncer-throttled-%d", id)
	kubeconfig := k.User(t, user)
	admin := kubernetes.NewForConfigOrDie(k.Config)
	ctx := context.Background()

	// The user may do anything (its permissions are not what this test is about), in a flow of
	// its own on a priority level with one share and no queue: beyond its seats, 429.
	_, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = admin.FlowcontrolV1().PriorityLevelConfigurations().Create(ctx, &flowcontrolv1.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{
			Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: ptr[int32](1),
				LendablePercent:          ptr[int32](0),
				LimitResponse:            flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fs, err := admin.FlowcontrolV1().FlowSchemas().Create(ctx, &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: user},
			MatchingPrecedence:         100,
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: user}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"},
					Resources: []string{"*"}, ClusterScope: true, Namespaces: []string{"*"}}},
				NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Priority and Fairness applies new objects asynchronously: wait until the user's requests
	// are classified into the new flow schema (the server names it in a response header).
	userCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := rest.TransportFor(userCfg)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the user's requests go through its flow schema", func() bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, userCfg.Host+"/api/v1/namespaces/"+ns, nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID") == string(fs.UID)
	})

	natsServer := testenv.StartNATS(t)
	health, metricsAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	envMap := map[string]string{
		"NATS_URL": natsServer.URL(), "KUBECONFIG": kubeconfig, "ARGOCD_NAMESPACE": ns, "OPERATOR_NAMESPACE": opNS,
		"HEALTH_ADDR": health, "METRICS_ADDR": metricsAddr,
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	var logs testenv.SyncBuffer
	go func() { done <- run(runCtx, func(k string) string { return envMap[k] }, &logs, &logs) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run returned %v", err)
		}
	})
	waitReadyz(t, health)

	nc, err := nats.Connect(natsServer.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	all := make([]events.Event, 0, intents)
	for i := range intents {
		in := intent(fmt.Sprintf("throttled-%03d", i), "agent")
		in.Cluster.Source = events.SourceRef{Kind: "rancher", ID: "s"}
		all = append(all, in)
	}
	if err := events.NewPublisher(js, "/enforcement/test").PublishAll(ctx, all); err != nil {
		t.Fatal(err)
	}
	argo := argoClient(t, k)
	eventually(t, "every intent's Application exists", func() bool {
		apps, err := argo.ArgoprojV1alpha1().Applications(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(apps.Items) == intents
	})

	throttled := scrapeCounter(t, metricsAddr, "enforcement_argo_syncer_kube_throttled_total")
	t.Logf("%d intents converged in %v; the API server answered 429 %d times; the write window ended at %d",
		intents, time.Since(start).Round(time.Millisecond), throttled, scrapeCounter(t, metricsAddr, "enforcement_argo_syncer_kube_write_window"))
	if throttled == 0 {
		t.Fatal("the API server never answered 429: the test's priority level did not throttle, so it shows nothing")
	}
	// Nothing was left for a retry later: every cluster has its project and its registration.
	projects, err := argo.ArgoprojV1alpha1().AppProjects(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(projects.Items) != intents {
		t.Errorf("AppProjects: %d, %v; want %d", len(projects.Items), err, intents)
	}
}

// scrapeCounter reads one unlabelled counter or gauge from a /metrics endpoint.
func scrapeCounter(t *testing.T, addr, name string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return int(f)
		}
	}
	t.Fatalf("%s not exported", name)
	return 0
}
