package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// The end-to-end tests of the safety guards listed in docs/safety.md.

// TestStaticClusterKeepsItsOwnCredentials: a static cluster that names a Secret of its own is
// registered in Argo CD with that Secret's token, and a static cluster without one with the
// static source's Secret. Before the guard, every static cluster got the source's token.
func TestStaticClusterKeepsItsOwnCredentials(t *testing.T) {
	s := startSystem(t, nil)
	s.createSecret("static", map[string][]byte{"token": []byte("source-token")})
	s.createSecret("edge-1-credentials", map[string][]byte{"token": []byte("edge-1-token")})
	err := s.kube.Client.Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "enforcement-static-clusters", Namespace: operatorNS},
		Data: map[string]string{"clusters.yaml": `
- name: edge-1
  url: https://edge-1.example:6443
  secretName: edge-1-credentials
- name: edge-2
  url: https://edge-2.example:6443
`},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.applyRule(operatorNS, `apiVersion: enforcement.globo.com/v1beta1
kind: ClusterRule
metadata:
  name: edge
spec:
  enforcements:
    - name: agent
      repo: https://github.com/example/agent
      path: chart
  source:
    static: {}
`)
	testenv.Eventually(t, 60*time.Second, func() error {
		return equal("cluster Secrets", s.clusterSecretNames(), []string{"edge-1", "edge-2"})
	})
	checkClusterSecret(t, s, "edge-1", "https://edge-1.example:6443", "edge-1-token")
	checkClusterSecret(t, s, "edge-2", "https://edge-2.example:6443", "source-token")
}
