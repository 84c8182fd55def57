// Package clusterprofile lists the ClusterProfiles of the sig-multicluster Cluster Inventory API
// (multicluster.x-k8s.io/v1alpha1) as a cluster source: what OCM, KubeFleet (Azure Fleet
// Manager) and GKE Fleet publish about their clusters.
//
// Why unstructured objects and not the API's Go types: sigs.k8s.io/cluster-inventory-api v0.1.2
// requires k8s.io/* v0.35, and this workspace stays on the v0.31 that argo-cd/v2 pins
// (hack/check-versions.sh). The CRD is taken from the module (pkg/testenv/crds/clusterinventory)
// and the objects are read through the dynamic client and unstructured maps, which need no
// generated types.
//
// A ClusterProfile is present while it exists, and eligible for new installs only while its
// ControlPlaneHealthy condition is True (the API's one predefined health condition); False or
// Unknown keeps what it has. Its status.properties (name → value) and status.version.kubernetes
// are template variables and selectable (properties), its labels are the cluster's labels.
//
// Argo CD registration follows KEP-5339 (ClusterProfile credentials plugins): the profile's
// status.accessProviders (and the deprecated credentialProviders, accessProviders winning on a
// name) give the server and CA of each provider; the consumer's configuration maps a provider
// name to an exec plugin. That configuration is the source Secret's key "providers", in the
// format of the KEP (cluster-inventory-api pkg/access):
//
//	{"providers": [{"name": "google", "execConfig": {"apiVersion": "client.authentication.k8s.io/v1beta1",
//	  "command": "gke-gcloud-auth-plugin", "args": [...]}}]}
//
// The first access provider the configuration knows becomes the cluster's URL and its Argo CD
// hints (argocd.caData, argocd.execProviderConfig.*), which argo-syncer turns into an
// execProviderConfig cluster Secret. Argo CD's execProviderConfig cannot pass the cluster's
// exec extension (provideClusterInfo) to the plugin, so plugins that need per-cluster data from
// the profile are not supported; neither are exec env variables (argo-syncer's hints carry
// none).
package clusterprofile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/ocm"
)

// Resource is the resource listed and watched; ListKind its list kind.
var (
	Resource = schema.GroupVersionResource{Group: "multicluster.x-k8s.io", Version: "v1alpha1", Resource: "clusterprofiles"}
	ListKind = schema.GroupVersionKind{Group: "multicluster.x-k8s.io", Version: "v1alpha1", Kind: "ClusterProfileList"}
)

// Source Secret keys: SecretKeyKubeconfig (events.SecretKeyKubeconfig) names a remote hub, as for
// the ocm source; SecretKeyProviders holds the access provider configuration (Providers).
const SecretKeyProviders = "providers"

// Attributes the source publishes besides the profile's name, namespace, labels and id.
const (
	AttrProperties        = "properties"        // status.properties, name → value
	AttrKubernetesVersion = "kubernetesVersion" // status.version.kubernetes
	AttrAccessProvider    = "accessProvider"    // the access provider the URL comes from
	AttrClusterManager    = "clusterManager"    // spec.clusterManager.name
	AttrDisplayName       = "displayName"       // spec.displayName

	// Argo CD registration hints (argo-syncer HintCAData, HintExec*), the GKE source's names.
	AttrArgoCDCAData         = "argocd.caData"
	AttrArgoCDExecCommand    = "argocd.execProviderConfig.command"
	AttrArgoCDExecArgs       = "argocd.execProviderConfig.args"
	AttrArgoCDExecAPIVersion = "argocd.execProviderConfig.apiVersion"
)

// ConditionControlPlaneHealthy decides eligibility.
const ConditionControlPlaneHealthy = "ControlPlaneHealthy"

// States a ClusterProfile is reported in, from ConditionControlPlaneHealthy.
const (
	StateHealthy   = "Healthy"   // True
	StateUnhealthy = "Unhealthy" // False
	StateUnknown   = "Unknown"   // Unknown, or no such condition yet
)

// Providers is the access provider configuration of KEP-5339.
type Providers struct {
	Providers []Provider `json:"providers"`
}

// Provider maps an access provider name to the exec plugin that obtains credentials for it.
type Provider struct {
	Name       string      `json:"name"`
	ExecConfig *ExecConfig `json:"execConfig"`
}

// ExecConfig is the part of client-go's exec credential plugin configuration Argo CD's
// execProviderConfig can carry.
type ExecConfig struct {
	APIVersion string   `json:"apiVersion"`
	Command    string   `json:"command"`
	Args       []string `json:"args,omitempty"`
}

func (p Providers) lookup(name string) *ExecConfig {
	for i := range p.Providers {
		if p.Providers[i].Name == name {
			return p.Providers[i].ExecConfig
		}
	}
	return nil
}

// ParseProviders reads the "providers" key of a source Secret. Absent or empty means no
// provider: clusters are listed, but carry no registration hints (argo-syncer then reports
// RegistrationInvalid for them). The error names the key and what is wrong, never a value.
func ParseProviders(data map[string][]byte) (Providers, error) {
	raw := data[SecretKeyProviders]
	var p Providers
	if len(strings.TrimSpace(string(raw))) == 0 {
		return p, nil
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if err := dec.Decode(&p); err != nil {
		return Providers{}, fmt.Errorf("key %q is not a providers configuration ({\"providers\": [{\"name\", \"execConfig\"}]}): %w", SecretKeyProviders, err)
	}
	var errs []error
	for i, pr := range p.Providers {
		switch {
		case pr.Name == "":
			errs = append(errs, fmt.Errorf("key %q: provider #%d has no name", SecretKeyProviders, i))
		case pr.ExecConfig == nil || pr.ExecConfig.Command == "":
			errs = append(errs, fmt.Errorf("key %q: provider %q has no execConfig.command", SecretKeyProviders, pr.Name))
		case pr.ExecConfig.APIVersion == "":
			errs = append(errs, fmt.Errorf("key %q: provider %q has no execConfig.apiVersion", SecretKeyProviders, pr.Name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Providers{}, err
	}
	return p, nil
}

// Lister lists the ClusterProfiles of one hub.
type Lister struct {
	// Hub reads ClusterProfiles.
	Hub client.Reader
	// Namespaces to list; empty: every namespace.
	Namespaces []string
	// Providers is the access provider configuration.
	Providers Providers
}

// List returns every ClusterProfile of the namespaces as a cluster, sorted by key. The listing is
// complete or an error: each namespace's list is answered whole.
func (l *Lister) List(ctx context.Context) ([]events.Cluster, error) {
	namespaces := events.NormaliseSourceList(l.Namespaces)
	if len(namespaces) == 0 {
		namespaces = []string{""}
	}
	var out []events.Cluster
	for _, ns := range namespaces {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(ListKind)
		if err := l.Hub.List(ctx, list, client.InNamespace(ns)); err != nil {
			if ns == "" {
				return nil, fmt.Errorf("list ClusterProfiles: %w", err)
			}
			return nil, fmt.Errorf("list ClusterProfiles in namespace %s: %w", ns, err)
		}
		for i := range list.Items {
			out = append(out, Convert(&list.Items[i], l.Providers))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Convert turns one ClusterProfile into a cluster. Its key is namespace/name (a profile is
// namespaced), its name the profile's name.
func Convert(cp *unstructured.Unstructured, providers Providers) events.Cluster {
	props := ocm.StatusPairs(cp, "properties", "name", "value")
	state := stateOf(cp)
	version, _, _ := unstructured.NestedString(cp.Object, "status", "version", "kubernetes")
	manager, _, _ := unstructured.NestedString(cp.Object, "spec", "clusterManager", "name")
	display, _, _ := unstructured.NestedString(cp.Object, "spec", "displayName")
	attrs := map[string]any{
		"name":                cp.GetName(),
		"namespace":           cp.GetNamespace(),
		"id":                  string(cp.GetUID()),
		"labels":              cp.GetLabels(),
		"state":               state,
		AttrProperties:        props,
		AttrKubernetesVersion: version,
		AttrClusterManager:    manager,
		AttrDisplayName:       display,
	}
	url := ""
	if name, cluster, ok := accessProvider(cp, providers); ok {
		url, _ = cluster["server"].(string)
		attrs[AttrAccessProvider] = name
		if ca, _ := cluster["certificate-authority-data"].(string); ca != "" {
			attrs[AttrArgoCDCAData] = ca // base64 of the PEM, as the JSON of a []byte field is
		}
		if exec := providers.lookup(name); exec != nil {
			attrs[AttrArgoCDExecCommand] = exec.Command
			attrs[AttrArgoCDExecAPIVersion] = exec.APIVersion
			args := make([]any, 0, len(exec.Args))
			for _, a := range exec.Args {
				args = append(args, a)
			}
			attrs[AttrArgoCDExecArgs] = args
		}
	}
	attrs["url"] = url
	labels := map[string]string{}
	for k, v := range cp.GetLabels() {
		labels[k] = v
	}
	return events.Cluster{
		Key:        cp.GetNamespace() + "/" + cp.GetName(),
		Name:       cp.GetName(),
		URL:        url,
		Labels:     labels,
		State:      state,
		Eligible:   state == StateHealthy,
		Attributes: attrs,
	}
}

// accessProvider picks the access provider the cluster is reached through: the first one (in
// the profile's order, accessProviders before the deprecated credentialProviders) that the
// configuration knows, else the first one at all (for its server only).
func accessProvider(cp *unstructured.Unstructured, providers Providers) (string, map[string]any, bool) {
	var all []map[string]any
	seen := map[string]bool{}
	for _, field := range []string{"accessProviders", "credentialProviders"} {
		items, _, _ := unstructured.NestedSlice(cp.Object, "status", field)
		for _, it := range items {
			m, ok := it.(map[string]any)
			if name, _ := m["name"].(string); ok && name != "" && !seen[name] {
				seen[name] = true
				all = append(all, m)
			}
		}
	}
	pick := func(m map[string]any) (string, map[string]any, bool) {
		name, _ := m["name"].(string)
		cluster, _ := m["cluster"].(map[string]any)
		return name, cluster, true
	}
	for _, m := range all {
		if name, _ := m["name"].(string); providers.lookup(name) != nil {
			return pick(m)
		}
	}
	if len(all) > 0 {
		return pick(all[0])
	}
	return "", nil, false
}

func stateOf(cp *unstructured.Unstructured) string {
	switch ocm.StatusPairs(cp, "conditions", "type", "status")[ConditionControlPlaneHealthy] {
	case "True":
		return StateHealthy
	case "False":
		return StateUnhealthy
	}
	return StateUnknown
}
