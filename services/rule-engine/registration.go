package main

import (
	"encoding/json"
	"strings"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// RegistrationPrefix marks the cluster attributes that are a source's hints for the Argo CD
// cluster Secret (events.Target.Registration): the EKS lister's argocd.awsAuthConfig.* and the
// GKE lister's argocd.execProviderConfig.*, and both listers' argocd.caData.
const RegistrationPrefix = "argocd."

// withRegistration returns the install target t with Registration filled from the cluster's
// "argocd.*" attributes, keys unchanged. A string attribute is copied as is; any other value
// (the exec provider's args list) is JSON-encoded, so `["gcp"]`; null is left out. The hints
// stay template variables too, as the sources document (they are not credentials: a CA
// certificate, a role ARN, a command). Only install intents carry them: argo-syncer needs them
// only to register a cluster, so uninstall intents and the stored pair state stay small.
func withRegistration(t events.Target, c *events.Cluster) events.Target {
	var reg map[string]string
	for k, v := range c.Attributes {
		if !strings.HasPrefix(k, RegistrationPrefix) || v == nil {
			continue
		}
		s, ok := v.(string)
		if !ok {
			b, err := json.Marshal(v)
			if err != nil {
				continue // attributes come from JSON: they always marshal
			}
			s = string(b)
		}
		if reg == nil {
			reg = make(map[string]string)
		}
		reg[k] = s
	}
	t.Registration = reg
	return t
}
