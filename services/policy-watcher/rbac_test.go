package main

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv/compat"
)

// originalRBAC creates the ClusterRole, ServiceAccount and ClusterRoleBinding of the original
// policy-watcher's deployment.yaml (pkg/testenv/compat), unchanged; existing ones are kept. Its
// Deployment and ClusterClaim are left out: the test runs the service itself, on a claim of its own.
func originalRBAC(t *testing.T, c *cluster) {
	t.Helper()
	for _, obj := range compat.Objects(t, "policy-watcher/deployment.yaml") {
		switch obj.GetKind() {
		case "ClusterRole", "ServiceAccount", "ClusterRoleBinding":
		default:
			continue
		}
		if err := c.kube.Client.Create(context.Background(), obj); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
}

// With nothing but the original's RBAC (get and list on Policies; get, patch and update on
// ClusterClaims: no watch, no create) the service polls, reports the missing claim clearly
// without failing or going unready, and does all of its work once the claim exists: the
// debounce clock, compliant after the stable duration, and putting a hand edit back.
func TestOriginalRBACOnly(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "rbac")
	claim := c.name("policy-watcher-claim-rbac")
	c.kube.Namespace(t, "dynamic-scoring")
	originalRBAC(t, c)
	kubeconfig := writeKubeconfig(t, c.kube, "", "system:serviceaccount:dynamic-scoring:policy-watcher-sa",
		"system:serviceaccounts", "system:serviceaccounts:dynamic-scoring")

	c.createPolicy("p", "NonCompliant")
	env := directEnv(c, claim, "300ms", "1")
	env["KUBECONFIG"] = kubeconfig
	s := startService(t, env)

	s.waitLog("Watching Policies is not allowed", 10*time.Second)
	s.waitLog("Watching ClusterClaim is not allowed", 10*time.Second)
	s.waitLog("ClusterClaim is missing and may not be created", 10*time.Second)
	s.WaitReady(5 * time.Second)
	if done, err := s.Exited(); done {
		t.Fatalf("service stopped: %v", err)
	}
	if got, _ := c.claim(claim); got.Exists {
		t.Fatalf("the claim exists although creating it is forbidden: %+v", got)
	}
	if v := s.metric(`enforcement_policy_watcher_api_errors_total{operation="create_claim"}`); v < 1 {
		t.Errorf("api_errors_total{create_claim} = %v, want at least 1", v)
	}

	// The deployment.yaml of the original creates the claim with "empty".
	c.createClaim(claim, events.Empty)
	c.waitClaim(claim, events.NonCompliant, 5*time.Second)

	c.setPolicy("p", "Compliant")
	start := time.Now()
	got, at := c.waitClaim(claim, events.Compliant, 5*time.Second)
	if at.Sub(start) < time.Second || !got.HasSince {
		t.Fatalf("compliant after %s (stable 1s), clock annotation %v", at.Sub(start), got.HasSince)
	}
	t.Logf("compliant written %s after the change, by polling", at.Sub(start).Round(time.Millisecond))

	c.editClaim(claim, events.Empty)
	start = time.Now()
	_, at = c.waitClaim(claim, events.Compliant, 3*time.Second)
	t.Logf("hand edit put back after %s", at.Sub(start).Round(time.Millisecond))
}
