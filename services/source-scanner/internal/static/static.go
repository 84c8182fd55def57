// Package static reads the static cluster source: clusters an operator lists by hand in a
// ConfigMap, for clusters no API knows about and for demos. The format is documented in the
// service README; it is strict (unknown fields are errors) because a typo that silently dropped
// a cluster would look like the cluster being removed.
package static

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/rancher"
)

// DataKey is the ConfigMap key that holds the cluster list.
const DataKey = "clusters.yaml"

// Entry is one cluster of clusters.yaml.
type Entry struct {
	// Name is the cluster's name and its key in the source. Required, unique.
	Name string `json:"name"`
	// URL is the API server URL. Required.
	URL string `json:"url"`
	// Labels select the cluster in rules.
	Labels map[string]string `json:"labels,omitempty"`
	// Attributes are free template variables.
	Attributes map[string]any `json:"attributes,omitempty"`
	// State is the cluster's lifecycle state, "active" by default; as for Rancher, a cluster in
	// state provisioning or waiting is listed but not eligible for new installs.
	State string `json:"state,omitempty"`
	// SecretName names a Secret in the operator namespace with the cluster's credentials (keys
	// token, optional caCert and insecure, as argo-syncer reads them). It travels as the cluster's
	// Source.SecretName; without it the cluster uses the static source's Secret (spec.source.secretName,
	// default "static").
	SecretName string `json:"secretName,omitempty"`
}

// Parse reads clusters.yaml (a YAML list of Entry). Any error (bad YAML, an unknown field, a
// missing name or URL, a duplicate name) fails the whole listing, which the scanner reports as
// degraded rather than as clusters that vanished.
func Parse(data []byte) ([]events.Cluster, error) {
	var entries []Entry
	if err := yaml.UnmarshalStrict(data, &entries); err != nil {
		return nil, fmt.Errorf("%s: %w", DataKey, err)
	}
	out := make([]events.Cluster, 0, len(entries))
	seen := make(map[string]bool, len(entries))
	var errs []error
	for i, e := range entries {
		switch {
		case strings.TrimSpace(e.Name) == "":
			errs = append(errs, fmt.Errorf("%s: entry #%d: name is required", DataKey, i))
			continue
		case seen[e.Name]:
			errs = append(errs, fmt.Errorf("%s: cluster %q is listed twice", DataKey, e.Name))
			continue
		}
		seen[e.Name] = true
		// The url reaches events, Argo CD and template variables: neither a malformed one (which
		// may hold a token) is echoed, nor one with credentials accepted.
		if u, err := url.Parse(e.URL); err != nil || u.Scheme == "" || u.Host == "" {
			errs = append(errs, fmt.Errorf("%s: cluster %q: url is not an absolute URL", DataKey, e.Name))
			continue
		}
		if events.URLHasCredentials(e.URL) {
			errs = append(errs, fmt.Errorf("%s: cluster %q: url %s has user information, a query or a fragment; the cluster's token belongs in its secretName Secret",
				DataKey, e.Name, events.RedactURL(e.URL)))
			continue
		}
		state := e.State
		if state == "" {
			state = "active"
		}
		attrs := make(map[string]any, len(e.Attributes))
		for k, v := range e.Attributes {
			attrs[k] = v
		}
		labels := e.Labels
		if labels == nil {
			labels = map[string]string{}
		}
		out = append(out, events.Cluster{
			// The scanner fills in the rest of the source; the Secret name set here is the
			// cluster's credentials reference (argo-syncer reads token/caCert/insecure from it).
			Source:     events.SourceRef{SecretName: e.SecretName},
			Key:        e.Name,
			Name:       e.Name,
			URL:        e.URL,
			Labels:     labels,
			State:      state,
			Eligible:   rancher.Eligible(state),
			Attributes: attrs,
		})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}
