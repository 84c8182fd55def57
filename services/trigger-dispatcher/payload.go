package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// payload is the JSON body of a webhook. "cluster" and "enforcement" are the original operator's
// body; "rule", "phase" and "deliveryId" are additions a receiver may ignore. It holds nothing
// secret: no credentials, no Secret references, no source attributes.
type payload struct {
	Cluster     payloadCluster     `json:"cluster"`
	Enforcement payloadEnforcement `json:"enforcement"`
	Rule        payloadRule        `json:"rule"`
	Phase       string             `json:"phase"`
	DeliveryID  string             `json:"deliveryId"`
}

// payloadCluster is the original's "cluster" object: the template variables name, id and url.
type payloadCluster struct {
	Name string `json:"name"`
	// ID is the cluster's id in its source (the Rancher cluster id, EKS ARN, ...).
	ID  string `json:"id"`
	URL string `json:"url"`
}

// payloadEnforcement is the rendered enforcement in the ClusterRule's own shape.
type payloadEnforcement struct {
	Name           string            `json:"name"`
	Repo           string            `json:"repo"`
	Path           string            `json:"path,omitempty"`
	Namespace      string            `json:"namespace"`
	TargetRevision string            `json:"targetRevision,omitempty"`
	Helm           *payloadHelm      `json:"helm,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
}

// payloadHelm holds the rendered Helm parameters as the ClusterRule writes them: name → value.
type payloadHelm struct {
	Parameters map[string]string `json:"parameters"`
}

// payloadRule names the ClusterRule the delivery belongs to (an addition to the original body).
type payloadRule struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// deliveryID is the stable id of one phase of one install intent: every attempt, every
// redelivery of the intent and every restart of the dispatcher sends the same id (body
// "deliveryId" and header webhook-id), so receivers can deduplicate. It is also the KV key of
// the delivery record, hence only [a-z0-9_].
func deliveryID(intentID, phase string) string {
	sum := sha256.Sum256([]byte(intentID + "\x00" + phase))
	return "dlv_" + hex.EncodeToString(sum[:16])
}

// buildPayload renders the body of one phase of an intent.
func buildPayload(in *events.InstallIntent, phase, id string) ([]byte, error) {
	e := in.Enforcement
	p := payload{
		Cluster: payloadCluster{Name: in.Cluster.Name, ID: in.Cluster.Key, URL: in.Cluster.URL},
		Enforcement: payloadEnforcement{
			Name: e.Name, Repo: e.Repo, Path: e.Path, Namespace: e.Namespace,
			TargetRevision: e.TargetRevision, Labels: e.Labels,
		},
		Rule:       payloadRule{Namespace: in.Rule.Namespace, Name: in.Rule.Name},
		Phase:      phase,
		DeliveryID: id,
	}
	if len(e.HelmParameters) > 0 {
		p.Enforcement.Helm = &payloadHelm{Parameters: make(map[string]string, len(e.HelmParameters))}
		for _, hp := range e.HelmParameters {
			p.Enforcement.Helm.Parameters[hp.Name] = hp.Value
		}
	}
	return json.Marshal(p)
}
