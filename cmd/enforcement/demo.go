package main

// The demo that both the local mode (local.go) and the compose demo (composeinit.go) seed: a
// static source with three clusters and one ClusterRule, so that Applications appear with no
// real cluster and no cloud account. Keeping it in one place keeps the two demos identical.

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// Namespaces of the demo installation (the defaults of design.md).
const (
	localOperatorNamespace = "enforcement"
	localArgoCDNamespace   = "argocd"
)

// staticConfigMap is the static source's default ConfigMap.
const staticConfigMap = events.DefaultStaticConfigMap

// demoSecret is the static source's default credentials Secret (spec.source.secretName: the kind).
const demoSecret = events.SourceKindStatic

// demoClusters is the static source of the demo: two production clusters and one that is still
// provisioning (present, but not eligible for installs).
const demoClusters = `- name: demo-eu-1
  url: https://demo-eu-1.example.com
  labels: {env: prod, region: eu}
  attributes: {provider: demo, tier: gold}
- name: demo-us-1
  url: https://demo-us-1.example.com
  labels: {env: prod, region: us}
  attributes: {provider: demo, tier: silver}
- name: demo-dev-1
  url: https://demo-dev-1.example.com
  labels: {env: dev, region: eu}
  state: provisioning
`

// demoRule selects the production clusters and installs two packages, one of them templated
// with the original's Jinja syntax.
const demoRule = `apiVersion: enforcement.globo.com/v1beta1
kind: ClusterRule
metadata:
  name: demo
spec:
  enforcements:
    - name: guestbook
      repo: https://github.com/argoproj/argocd-example-apps
      path: guestbook
    - name: helm-guestbook
      repo: https://github.com/argoproj/argocd-example-apps
      path: helm-guestbook
      namespace: ${{ name }}
      helm:
        parameters:
          replicaCount: ${% if tier == 'gold' %}3${% else %}1${% endif %}
          clusterURL: ${{ url }}
  source:
    static:
      labels:
        env: prod
`

func seedDemo(ctx context.Context, cfg *rest.Config) error {
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	for _, ns := range []string{localOperatorNamespace, localArgoCDNamespace} {
		err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace %s: %w", ns, err)
		}
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: staticConfigMap, Namespace: localOperatorNamespace},
		Data:       map[string]string{"clusters.yaml": demoClusters},
	}
	if err := c.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ConfigMap: %w", err)
	}
	// The static source's default Secret, which argo-syncer reads to register the demo clusters
	// in Argo CD. The clusters do not exist, so a placeholder token is all they need.
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: demoSecret, Namespace: localOperatorNamespace},
		StringData: map[string]string{"token": "demo-placeholder-token", "insecure": "true"},
	}
	if err := c.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Secret: %w", err)
	}
	rule := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(demoRule), &rule.Object); err != nil {
		return err
	}
	rule.SetNamespace(localOperatorNamespace)
	if err := c.Create(ctx, rule); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRule: %w", err)
	}
	return nil
}
