package main

// This file renders the Argo CD objects argo-syncer writes. The functions are pure: the same
// intent and settings always give the same object, so that a hash of the rendered object tells
// whether the stored one is already as wanted (and a redelivered intent writes nothing).

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"

	argov1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// Labels and annotations argo-syncer writes. cluster_name is the original operator's label and is
// kept for compatibility (and adoption); the others mark ownership.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedByValue = "enforcement"
	LabelCluster   = "cluster_name"
	// Argo CD's cluster Secret label (argo-cd common.LabelKeySecretType), copied rather than
	// importing argo-cd/common, which drags in the whole Argo CD server.
	LabelSecretType   = "argocd.argoproj.io/secret-type"
	SecretTypeCluster = "cluster"

	LabelRuleNamespace = "enforcement.globo.com/rule-namespace"
	LabelRuleName      = "enforcement.globo.com/rule"
	LabelEnforcement   = "enforcement.globo.com/enforcement"

	AnnotationRule        = "enforcement.globo.com/rule"
	AnnotationRuleUID     = "enforcement.globo.com/rule-uid"
	AnnotationEnforcement = "enforcement.globo.com/enforcement"
	AnnotationCluster     = "enforcement.globo.com/cluster"
	AnnotationSpecHash    = "enforcement.globo.com/spec-hash"
	// AnnotationAppliedHash is the hash of the object argo-syncer last applied. Equal hash, equal
	// object: nothing to write.
	AnnotationAppliedHash = "enforcement.globo.com/applied-hash"
	// AnnotationUnregister marks an AppProject whose cluster no rule targets any more while some of
	// its Applications are still being deleted; the cluster is unregistered once they are gone.
	AnnotationUnregister = "enforcement.globo.com/unregister"
	// AnnotationIdentity records, on the cluster Secret, AppProject and Applications argo-syncer
	// writes, the provider identity (events.Target.Identity) of the cluster they were written
	// for: another cluster of the same name never writes over them (NameConflict).
	AnnotationIdentity = "enforcement.globo.com/cluster-identity"
	// AnnotationCredentials records, on a cluster Secret, the Secret its credentials were read
	// from ("<namespace>/<name>": the intent's source or static cluster Secret, or OCM's
	// per-cluster one; none for EKS and GKE, which carry no credential). An install intent that
	// references another Secret has the credentials refreshed in place (updateClusterSecret).
	AnnotationCredentials = "enforcement.globo.com/credentials-from"
	// AnnotationCreatedBy records, on an Application an install intent created, that intent's
	// id. The creation and its record are one write, so an intent handled again after a crash or
	// a lost acknowledgement between creating the Application and reporting it still reports the
	// creation (InstallSucceeded.Created, the afterInstall moment). Later applies leave it out,
	// and it stays until one converts the creation's fields (writeApplication); it is left out
	// of the applied hash.
	AnnotationCreatedBy = "enforcement.globo.com/created-by-intent"
	// AnnotationGrant records, on the AppProject of a ClusterRuleGrant on a cluster
	// (TenantProjectName), the grant's name.
	AnnotationGrant = "enforcement.globo.com/grant"

	// FieldManager is argo-syncer's server-side apply field manager. Fields Argo CD (or anyone
	// else) manages, such as status, operation and finalizers, are left alone.
	FieldManager = "enforcement-argo-syncer"

	// DefaultNamespace is the enforcement namespace when a rule names none (the original's default).
	DefaultNamespace = "default"
)

// ProjectName is the AppProject of a cluster: named after it, as the original operator did
// (normalised by events.ObjectName). One written by an earlier version may have its legacy name
// (names.go).
func ProjectName(cluster string) string { return events.ObjectName(cluster) }

// TenantProjectName is the AppProject of the Applications of rules acting under the
// ClusterRuleGrant grant on cluster: events.ObjectName("<cluster>.<grant>"). The dot is not
// allowed in a DNS label, so the name is always normalised with a hash suffix
// ("<cluster>-<grant>-<16 hex digits>") and never equals the per-cluster project of a cluster.
func TenantProjectName(cluster, grant string) string { return events.ObjectName(cluster + "." + grant) }

// ClusterSecretName is the name of the cluster Secret argo-syncer creates for a cluster
// (normalised by events.ObjectName; an earlier version's may have its legacy name, names.go).
func ClusterSecretName(cluster string) string { return "cluster-" + events.ObjectName(cluster) }

// applyObject is the body of a server-side apply: only the fields argo-syncer owns. The typed
// argo-cd objects cannot be sent whole, because their zero-valued status would be applied too.
type applyObject struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Metadata   applyMeta `json:"metadata"`
	Spec       any       `json:"spec"`
}

type applyMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// seal stores the hash of the object (without the hash and created-by annotations) in
// AnnotationAppliedHash: what inSync compares with the object in the cache before any write.
func (o *applyObject) seal() {
	if o.Metadata.Annotations == nil {
		o.Metadata.Annotations = map[string]string{}
	}
	delete(o.Metadata.Annotations, AnnotationAppliedHash)
	createdBy, created := o.Metadata.Annotations[AnnotationCreatedBy]
	delete(o.Metadata.Annotations, AnnotationCreatedBy) // an update without it is the same object
	sum := sha256.Sum256(o.body())
	o.Metadata.Annotations[AnnotationAppliedHash] = hex.EncodeToString(sum[:12])
	if created {
		o.Metadata.Annotations[AnnotationCreatedBy] = createdBy
	}
}

// body is the JSON of the apply, as the object is now: seal it first, so that it carries its hash.
func (o *applyObject) body() []byte {
	body, err := json.Marshal(o)
	if err != nil {
		panic(fmt.Sprintf("marshal %s: %v", o.Kind, err)) // plain structs of strings always marshal
	}
	return body
}

func (o *applyObject) hash() string { return o.Metadata.Annotations[AnnotationAppliedHash] }

// RenderApplication renders the Application of an install intent in namespace ns: named
// n.application (events.ApplicationName(cluster, enforcement), or the legacy name of one an
// earlier version wrote), in the cluster's AppProject n.project, destination by cluster name
// and the enforcement's namespace, automated sync with prune and self-heal, and
// CreateNamespace=true. The enforcement's own labels come first; Enforcement's labels win.
func RenderApplication(ns string, in *events.InstallIntent, n objectNames) *applyObject {
	e := in.Enforcement
	labels := map[string]string{}
	for k, v := range e.Labels {
		labels[k] = v
	}
	labels[LabelManagedBy] = ManagedByValue
	labels[LabelCluster] = label(in.Cluster.Name, n.legacyApplication)
	// Rule and enforcement go into labels only where the value is a valid label value; the
	// annotations always hold the full references.
	for k, v := range map[string]string{
		LabelRuleNamespace: in.Rule.Namespace,
		LabelRuleName:      in.Rule.Name,
		LabelEnforcement:   e.Name,
	} {
		if len(validation.IsValidLabelValue(v)) == 0 {
			labels[k] = v
		} else {
			delete(labels, k)
		}
	}
	annotations := map[string]string{
		AnnotationRule:        in.Rule.String(),
		AnnotationEnforcement: e.Name,
		AnnotationCluster:     in.Cluster.Name,
		AnnotationSpecHash:    in.SpecHash,
	}
	if in.Rule.UID != "" {
		annotations[AnnotationRuleUID] = in.Rule.UID
	}
	if in.Cluster.Identity != "" {
		annotations[AnnotationIdentity] = in.Cluster.Identity
	}
	namespace := e.Namespace
	if namespace == "" {
		namespace = DefaultNamespace
	}
	source := &argov1.ApplicationSource{RepoURL: e.Repo, Path: e.Path, TargetRevision: e.TargetRevision}
	if len(e.HelmParameters) > 0 {
		source.Helm = &argov1.ApplicationSourceHelm{}
		for _, p := range e.HelmParameters {
			source.Helm.Parameters = append(source.Helm.Parameters, argov1.HelmParameter{Name: p.Name, Value: p.Value})
		}
	}
	return &applyObject{
		APIVersion: "argoproj.io/v1alpha1",
		Kind:       "Application",
		Metadata: applyMeta{
			Name:        n.application,
			Namespace:   ns,
			Labels:      labels,
			Annotations: annotations,
		},
		Spec: argov1.ApplicationSpec{
			Source:      source,
			Destination: argov1.ApplicationDestination{Name: in.Cluster.Name, Namespace: namespace},
			Project:     n.project,
			SyncPolicy: &argov1.SyncPolicy{
				Automated:   &argov1.SyncPolicyAutomated{Prune: true, SelfHeal: true},
				SyncOptions: argov1.SyncOptions{"CreateNamespace=true"},
			},
		},
	}
}

// ProjectSettings are the configurable parts of an AppProject.
type ProjectSettings struct {
	// AnyRepo allows every repository ("*") instead of the rules' repositories.
	AnyRepo bool
	// ClusterResources allows every cluster-scoped resource.
	ClusterResources bool
}

// RenderProject renders the AppProject of a cluster in namespace ns: named n.project (after the
// cluster), allowing it as destination by API URL and by name (any namespace), the given
// repositories (sorted, without duplicates) or any, and cluster-scoped resources when configured.
func RenderProject(ns string, n objectNames, cluster, url string, repos []string, s ProjectSettings) *applyObject {
	if s.AnyRepo {
		repos = []string{"*"}
	} else {
		repos = slices.Clone(repos)
		slices.Sort(repos)
		repos = slices.Compact(repos)
	}
	var dests []argov1.ApplicationDestination
	if url != "" {
		dests = append(dests, argov1.ApplicationDestination{Server: url, Namespace: "*"})
	}
	dests = append(dests, argov1.ApplicationDestination{Name: cluster, Namespace: "*"})
	spec := argov1.AppProjectSpec{
		Description:  "Enforcement packages for cluster " + cluster,
		SourceRepos:  repos,
		Destinations: dests,
	}
	if s.ClusterResources {
		spec.ClusterResourceWhitelist = []metav1.GroupKind{{Group: "*", Kind: "*"}}
	}
	return &applyObject{
		APIVersion: "argoproj.io/v1alpha1",
		Kind:       "AppProject",
		Metadata: applyMeta{
			Name:      n.project,
			Namespace: ns,
			Labels:    map[string]string{LabelManagedBy: ManagedByValue, LabelCluster: label(cluster, n.legacyProject)},
			Annotations: map[string]string{
				AnnotationCluster: cluster,
			},
		},
		Spec: spec,
	}
}

// RenderTenantProject renders the AppProject name (TenantProjectName) of the ClusterRuleGrant g on
// a cluster in namespace ns. Everything it allows is the grant's: its repositories, its
// destination namespaces on this cluster only (by API URL and by name), and its cluster-scoped
// kinds (none when the grant lists none). Argo CD enforces it on every sync, so an Application in
// it cannot exceed the grant, whatever wrote the Application.
func RenderTenantProject(ns, name, cluster, url string, g *events.Grant) *applyObject {
	spec := argov1.AppProjectSpec{
		Description: "Enforcement packages of ClusterRuleGrant " + g.Name + " for cluster " + cluster,
		SourceRepos: slices.Clone(g.SourceRepos),
	}
	for _, dns := range g.DestinationNamespaces {
		if url != "" {
			spec.Destinations = append(spec.Destinations, argov1.ApplicationDestination{Server: url, Namespace: dns})
		}
		spec.Destinations = append(spec.Destinations, argov1.ApplicationDestination{Name: cluster, Namespace: dns})
	}
	for _, gk := range g.ClusterResources {
		spec.ClusterResourceWhitelist = append(spec.ClusterResourceWhitelist, metav1.GroupKind{Group: gk.Group, Kind: gk.Kind})
	}
	return &applyObject{
		APIVersion: "argoproj.io/v1alpha1",
		Kind:       "AppProject",
		Metadata: applyMeta{
			Name:        name,
			Namespace:   ns,
			Labels:      map[string]string{LabelManagedBy: ManagedByValue, LabelCluster: clusterLabel(cluster)},
			Annotations: map[string]string{AnnotationCluster: cluster, AnnotationGrant: g.Name},
		},
		Spec: spec,
	}
}

// errCredentials says a source Secret lacks what a cluster registration needs. The message names
// keys, never values.
var errCredentials = errors.New("source Secret has no usable credentials")

// errRegistration says an intent's registration hints (Target.Registration) cannot build a
// cluster config. Hints are not secret, but messages still name keys rather than quote values.
var errRegistration = errors.New("registration hints are unusable")

// Source kinds whose clusters are registered other than with the source Secret's bearer token.
const (
	KindEKS = events.SourceKindEKS
	KindGKE = events.SourceKindGKE
	KindOCM = events.SourceKindOCM
	KindAKS = events.SourceKindAKS
	// KindClusterProfile clusters are registered from hints like GKE's: the scanner takes the
	// server, CA and exec plugin from the ClusterProfile's status.accessProviders and its
	// access provider configuration (KEP-5339).
	KindClusterProfile = events.SourceKindClusterProfile
)

// Registration hint keys (Target.Registration), as the source-scanner's EKS and GKE listers name
// their cluster attributes (services/source-scanner/internal/eks and internal/gke; copied, since
// those packages are internal to the scanner). Values are strings; a hint whose attribute is not
// a string (the exec args) arrives JSON-encoded.
const (
	HintAWSClusterName = "argocd.awsAuthConfig.clusterName"
	HintAWSRoleARN     = "argocd.awsAuthConfig.roleARN"
	HintCAData         = "argocd.caData"
	HintExecCommand    = "argocd.execProviderConfig.command"
	HintExecArgs       = "argocd.execProviderConfig.args"
	HintExecAPIVersion = "argocd.execProviderConfig.apiVersion"
	// HintExecEnv is the exec provider's environment (AKS: AAD_LOGIN_METHOD), a JSON object
	// of strings.
	HintExecEnv          = "argocd.execProviderConfig.env"
	ocmCredentialsPrefix = "ocm-"
)

// OCMCredentialsSecretName is the per-cluster Secret argo-syncer reads to register an OCM managed
// cluster: "ocm-<cluster>" in the namespace of the source Secrets (OPERATOR_NAMESPACE), the
// convention the source-scanner documents (internal/ocm CredentialsSecretPrefix).
func OCMCredentialsSecretName(cluster string) string { return ocmCredentialsPrefix + cluster }

// ClusterConfigFromSecret builds Argo CD's cluster connection config from a Secret's data, read
// by the shared parsers of pkg/events so that argo-syncer and source-scanner accept the same
// keys: a rancher source Secret (events.ParseRancherSecret: url, token, optional caCert and
// insecure, as the scanner lists it with) registers its clusters with its token and CA; any
// other kind's Secret (the static source's, a static cluster's own, OCM's per-cluster
// "ocm-<cluster>") is a cluster credentials Secret (events.ParseClusterSecret: token or
// bearerToken, optional caCert, caData or ca.crt, and insecure). EKS and GKE are registered from
// hints (ClusterConfigFromHints), without credentials.
func ClusterConfigFromSecret(kind string, data map[string][]byte) (argov1.ClusterConfig, error) {
	var (
		creds events.ClusterCredentials
		err   error
	)
	if kind == events.SourceKindRancher {
		var rc events.RancherCredentials
		rc, err = events.ParseRancherSecret(data)
		creds = rc.Cluster()
	} else {
		creds, err = events.ParseClusterSecret(data)
	}
	if err != nil {
		return argov1.ClusterConfig{}, fmt.Errorf("%w: %s Secret: %w", errCredentials, kind, err)
	}
	var cfg argov1.ClusterConfig
	cfg.BearerToken = creds.Token
	cfg.CAData = creds.CACert
	cfg.Insecure = creds.Insecure
	return cfg, nil
}

// ClusterConfigFromHints builds the cluster config of an EKS, GKE, AKS or ClusterProfile cluster from its source's
// registration hints alone, in Argo CD's documented formats (operator-manual/declarative-setup.md):
//
//	eks: {"awsAuthConfig": {"clusterName": ..., "roleARN": ... (when given)},
//	      "tlsClientConfig": {"insecure": false, "caData": ...}}
//	gke: {"execProviderConfig": {"command": "argocd-k8s-auth", "args": ["gcp"],
//	      "apiVersion": "client.authentication.k8s.io/v1beta1"},
//	      "tlsClientConfig": {"insecure": false, "caData": ...}}
//	aks: {"execProviderConfig": {"command": "argocd-k8s-auth", "args": ["azure"],
//	      "env": {"AAD_LOGIN_METHOD": "workloadidentity"},
//	      "apiVersion": "client.authentication.k8s.io/v1beta1"},
//	      "tlsClientConfig": {"insecure": false, "caData": ...}}
//	clusterprofile: as gke, with the command, args and apiVersion of the access provider's exec
//	      plugin (KEP-5339) and the CA of its status.accessProviders entry
//
// Argo CD mints the cluster tokens itself (argocd-k8s-auth with its own IRSA / Pod Identity or
// Workload Identity; for AKS the AZURE_* variables the workload identity webhook injects into
// Argo CD's pods), so no credential is read or written. Every hint but the role ARN and the exec
// environment is required; the CA must be the base64 of a PEM certificate, since these clusters' CAs are private.
func ClusterConfigFromHints(kind string, hints map[string]string) (argov1.ClusterConfig, error) {
	var cfg argov1.ClusterConfig
	var errs []error
	need := func(key string) string {
		v := strings.TrimSpace(hints[key])
		if v == "" {
			errs = append(errs, fmt.Errorf("hint %q is missing", key))
		}
		return v
	}
	switch kind {
	case KindEKS:
		cfg.AWSAuthConfig = &argov1.AWSAuthConfig{
			ClusterName: need(HintAWSClusterName),
			RoleARN:     strings.TrimSpace(hints[HintAWSRoleARN]),
		}
	case KindGKE, KindAKS, KindClusterProfile:
		exec := &argov1.ExecProviderConfig{Command: need(HintExecCommand), APIVersion: need(HintExecAPIVersion)}
		if raw := need(HintExecArgs); raw != "" {
			args, err := execArgs(raw)
			if err != nil {
				errs = append(errs, fmt.Errorf("hint %q: %w", HintExecArgs, err))
			}
			exec.Args = args
		}
		if raw := strings.TrimSpace(hints[HintExecEnv]); raw != "" {
			if err := json.Unmarshal([]byte(raw), &exec.Env); err != nil {
				errs = append(errs, fmt.Errorf("hint %q is not a JSON object of strings", HintExecEnv))
			}
		}
		cfg.ExecProviderConfig = exec
	default:
		return cfg, fmt.Errorf("%w: source kind %q is not registered from hints", errRegistration, kind)
	}
	if raw := need(HintCAData); raw != "" {
		ca, err := base64.StdEncoding.DecodeString(raw)
		if block, _ := pem.Decode(ca); err != nil || block == nil {
			errs = append(errs, fmt.Errorf("hint %q is not the base64 of a PEM certificate", HintCAData))
		}
		cfg.CAData = ca
	}
	if err := errors.Join(errs...); err != nil {
		return argov1.ClusterConfig{}, fmt.Errorf("%w for %s cluster: %w", errRegistration, kind, err)
	}
	return cfg, nil
}

// execArgs reads the exec provider's args hint: a JSON array of strings (how a list attribute
// arrives), or one plain argument.
func execArgs(raw string) ([]string, error) {
	if !strings.HasPrefix(raw, "[") {
		return []string{raw}, nil
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		return nil, errors.New("not a JSON array of strings")
	}
	return args, nil
}

// RenderClusterSecret renders a cluster Secret in Argo CD's declarative format: label
// argocd.argoproj.io/secret-type=cluster and the keys name, server and config (JSON).
func RenderClusterSecret(ns string, t events.Target, cfg argov1.ClusterConfig) (*corev1.Secret, error) {
	config, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("marshal cluster config: %w", err)
	}
	annotations := map[string]string{AnnotationCluster: t.Name}
	if t.Identity != "" {
		annotations[AnnotationIdentity] = t.Identity
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      ClusterSecretName(t.Name),
			Namespace: ns,
			Labels: map[string]string{
				LabelSecretType: SecretTypeCluster,
				LabelManagedBy:  ManagedByValue,
				LabelCluster:    clusterLabel(t.Name),
			},
			Annotations: annotations,
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			"name":   []byte(t.Name),
			"server": []byte(t.URL),
			"config": config,
		},
	}, nil
}
