// Package ocm lists Open Cluster Management ManagedClusters on a hub as a cluster source.
//
// A ManagedCluster is present while it exists on the hub, and eligible for new installs only
// when the hub accepted it and it is joined and available (the three conditions OCM's
// registration controller maintains). Its ClusterClaims (status.clusterClaims) become template
// variables (attribute "clusterClaims") and selectable labels, so a rule can target only the
// clusters whose policy-watcher claim says "compliant": a claim change is a cluster update, and
// the rule engine re-evaluates. A hub label wins over a claim of the same name.
//
// The hub is the scanner's own API server (in-cluster), or the one named by the `kubeconfig`
// key of the source Secret (events.SecretKeyKubeconfig) when that Secret exists.
package ocm

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// AttributeClaims is the attribute that holds a cluster's claims (name → value).
const AttributeClaims = "clusterClaims"

// CredentialsSecretPrefix documents where argo-syncer finds the credentials to register a
// managed cluster in Argo CD: a Secret "ocm-<cluster>" in OPERATOR_NAMESPACE with the keys
// "token" (a bearer token) and "ca.crt" (the PEM CA), the keys the managed-serviceaccount
// add-on writes; see services/argo-syncer/README.md, "Cluster registration".
const CredentialsSecretPrefix = "ocm-"

// ManagedClusterList is the GroupVersionKind listed.
var ManagedClusterList = schema.GroupVersionKind{Group: "cluster.open-cluster-management.io", Version: "v1", Kind: "ManagedClusterList"}

// HubConfig builds the client configuration of a remote hub from an ocm source Secret
// (events.ParseOCMSecret). An unusable kubeconfig is an error naming the Secret key.
func HubConfig(creds events.OCMCredentials) (*rest.Config, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(creds.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("key %q is not a usable kubeconfig: %w", events.SecretKeyKubeconfig, err)
	}
	return cfg, nil
}

// Lister lists the ManagedClusters of one hub.
type Lister struct {
	// Hub reads ManagedClusters (a cached or a direct client).
	Hub client.Reader
}

// List returns every ManagedCluster as a cluster. The listing is complete or an error: the API
// server answers a list whole.
func (l *Lister) List(ctx context.Context) ([]events.Cluster, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(ManagedClusterList)
	if err := l.Hub.List(ctx, list); err != nil {
		return nil, fmt.Errorf("list ManagedClusters: %w", err)
	}
	out := make([]events.Cluster, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, Convert(&list.Items[i]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Convert turns one ManagedCluster into a cluster: the first client config URL is the API
// server, claims and labels are merged into the labels (labels win), and the whole object minus
// its managed fields is exposed to templates.
func Convert(mc *unstructured.Unstructured) events.Cluster {
	claims := StatusPairs(mc, "clusterClaims", "name", "value")
	labels := map[string]string{}
	for k, v := range claims {
		labels[k] = v
	}
	for k, v := range mc.GetLabels() {
		labels[k] = v
	}
	url := ""
	configs, _, _ := unstructured.NestedSlice(mc.Object, "spec", "managedClusterClientConfigs")
	if len(configs) > 0 {
		if m, ok := configs[0].(map[string]any); ok {
			url, _ = m["url"].(string)
		}
	}
	accepted, _, _ := unstructured.NestedBool(mc.Object, "spec", "hubAcceptsClient")
	state := stateOf(mc)
	attrs := map[string]any{
		"name":          mc.GetName(),
		"url":           url,
		"id":            string(mc.GetUID()),
		"labels":        mc.GetLabels(),
		AttributeClaims: claims,
		"state":         state,
	}
	if spec, ok := mc.Object["spec"]; ok {
		attrs["spec"] = jsonCopy(spec)
	}
	return events.Cluster{
		Key:        mc.GetName(),
		Name:       mc.GetName(),
		URL:        url,
		Labels:     labels,
		State:      state,
		Eligible:   accepted && state == StateAvailable,
		Attributes: attrs,
	}
}

// States a ManagedCluster is reported in, from its conditions.
const (
	StateAvailable   = "Available"   // accepted, joined and available
	StateNotJoined   = "NotJoined"   // registered but not joined (or not accepted) yet
	StateUnavailable = "Unavailable" // joined, but its agent does not report available
)

func stateOf(mc *unstructured.Unstructured) string {
	cond := StatusPairs(mc, "conditions", "type", "status")
	switch {
	case cond["HubAcceptedManagedCluster"] != "True" || cond["ManagedClusterJoined"] != "True":
		return StateNotJoined
	case cond["ManagedClusterConditionAvailable"] != "True":
		return StateUnavailable
	}
	return StateAvailable
}

// StatusPairs reads the list status.<list> of mc, whose items are objects, as a map from each
// item's key field to its value field (status.clusterClaims by name, status.conditions by type;
// the clusterprofile source reads a ClusterProfile's properties and conditions with it too).
// Items without a key are skipped.
func StatusPairs(mc *unstructured.Unstructured, list, key, value string) map[string]string {
	out := map[string]string{}
	items, _, _ := unstructured.NestedSlice(mc.Object, "status", list)
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			k, _ := m[key].(string)
			v, _ := m[value].(string)
			if k != "" {
				out[k] = v
			}
		}
	}
	return out
}

// jsonCopy returns v as plain JSON values, so attributes never alias the cached object.
func jsonCopy(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}
