package main

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/eks"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/gke"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/rancher"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/static"
)

// sourceSpec is one distinct source referenced by the ClusterRules, with everything needed to
// list it. Rules with the same kind, Secret and filters share one sourceSpec; everything a
// lister is built from takes part in the source id, so one id always means one lister.
type sourceSpec struct {
	Ref events.SourceRef
	// Filters are the Rancher query parameters, or the GKE field filters; Filter is the GKE
	// filter expression.
	Filters map[string]string
	Filter  string
	// ConfigMap is the static source's ConfigMap.
	ConfigMap string
	// Regions are the EKS regions; Projects the GKE projects; Namespaces the ClusterProfile
	// namespaces.
	Regions    []string
	Projects   []string
	Namespaces []string
	// Subscriptions and ResourceGroups are the AKS source's.
	Subscriptions, ResourceGroups []string
	// Rules names the rules (namespace/name) using the source.
	Rules []string
	// Releases are the valid release annotations of those rules in the operator namespace.
	Releases []scanner.Release
}

// ignoredRelease is a release annotation the scan loop does not pass on, and why.
type ignoredRelease struct {
	Rule, Value, Why string
	// Object is the rule, for the Kubernetes Event that tells its author.
	Object *v1beta1.ClusterRule
}

// sourceOf derives a rule's source: its SourceRef is v1beta1.Source.Ref, the derivation
// rule-engine's selection uses too (TestPublishedSourceIsTheRuleSource runs the scanner against
// it), and the rest is what the kind's lister needs. ok is false for a rule without any source
// kind.
func sourceOf(rule *v1beta1.ClusterRule, operatorNamespace string) (spec sourceSpec, ok bool) {
	src := rule.Spec.Source
	ref, err := src.Ref(operatorNamespace)
	if err != nil {
		return spec, false
	}
	spec.Ref = ref
	switch {
	case src.Rancher != nil:
		spec.Filters = src.Rancher.Filters
	case src.Static != nil:
		spec.ConfigMap = src.Static.ConfigMapName()
	case src.EKS != nil:
		spec.Regions = src.EKS.Regions
	case src.GKE != nil:
		spec.Projects, spec.Filters, spec.Filter = src.GKE.Projects, src.GKE.Filters, src.GKE.Filter
	case src.AKS != nil:
		spec.Subscriptions, spec.ResourceGroups = src.AKS.Subscriptions, src.AKS.ResourceGroups
	case src.ClusterProfile != nil:
		spec.Namespaces = src.ClusterProfile.Namespaces
	}
	return spec, true
}

// sourcesFromRules groups the rules by source, in source id order, with the release annotations
// of the rules in the operator namespace. A rule in another namespace counts only when one of the
// grants (the ClusterRuleGrants of the operator namespace) covers its namespace and allows its
// source kind and Secret: a tenant's rule that nothing grants is NotPermitted at the rule engine,
// and must not make the scanner call a provider either. A release annotation on a rule in another
// namespace, or a malformed one, releases nothing and is returned in ignored.
func sourcesFromRules(rules []v1beta1.ClusterRule, grants []v1beta1.ClusterRuleGrant, operatorNamespace string, logger *slog.Logger) (specs []*sourceSpec, ignored []ignoredRelease) {
	byID := map[string]*sourceSpec{}
	for i := range rules {
		rule := &rules[i]
		spec, ok := sourceOf(rule, operatorNamespace)
		if !ok {
			logger.Debug("Skipping rule: it names no source kind", "rule", rule.Namespace+"/"+rule.Name)
			continue
		}
		name := rule.Namespace + "/" + rule.Name
		v, set := rule.Annotations[scanner.ReleaseAnnotation]
		// No release, or rule-engine's release of a rule edit's held removals.
		releases := set && !strings.HasPrefix(strings.TrimSpace(v), "generation/")
		if rule.Namespace != operatorNamespace {
			if releases {
				ignored = append(ignored, ignoredRelease{Rule: name, Value: v, Object: rule,
					Why: "held removals are released only from ClusterRules in the operator namespace " + operatorNamespace})
			}
			if !granted(grants, rule.Namespace, spec.Ref) {
				logger.Debug("Skipping rule: no ClusterRuleGrant allows its source", "rule", name, "source", spec.Ref.ID)
				continue
			}
		}
		cur, seen := byID[spec.Ref.ID]
		if !seen {
			cur = &spec
			byID[spec.Ref.ID] = cur
		}
		cur.Rules = append(cur.Rules, name)
		if !releases || rule.Namespace != operatorNamespace {
			continue
		}
		trip, err := scanner.ParseReleaseValue(v, spec.Ref.ID)
		if err != nil {
			ignored = append(ignored, ignoredRelease{Rule: name, Value: v, Object: rule, Why: err.Error()})
			continue
		}
		cur.Releases = append(cur.Releases, scanner.Release{Rule: name, Trip: trip})
	}
	specs = make([]*sourceSpec, 0, len(byID))
	for _, s := range byID {
		sort.Strings(s.Rules)
		specs = append(specs, s)
	}
	sort.Slice(specs, func(i, j int) bool { return specs[i].Ref.ID < specs[j].Ref.ID })
	return specs, ignored
}

// granted says whether one of the grants covers namespace ns and allows the source's kind and
// Secret (the rule engine picks among them and checks the rest of the rule).
func granted(grants []v1beta1.ClusterRuleGrant, ns string, src events.SourceRef) bool {
	for i := range grants {
		g := &grants[i].Spec
		if grants[i].DeletionTimestamp.IsZero() && g.Covers(ns) && g.PermitsSource(src.Kind, src.SecretName) {
			return true
		}
	}
	return false
}

// sourceLister lists one source. The scan loop keeps one per source id for as long as some rule
// uses the source: the EKS lister's describe cache, the GKE client's token and the OCM hub's
// watch live across scans. Close releases what it holds (the OCM watch).
type sourceLister interface {
	scanner.Lister
	Close()
}

// listerDeps is what the listers are built from besides the source.
type listerDeps struct {
	kube    client.Reader
	kubeCfg *rest.Config // the service's own API server: the OCM hub without a kubeconfig Secret
	cfg     config
	// eksCalls and gkeCalls count the cloud API calls (registered once with the service's
	// registry).
	eksCalls, gkeCalls, aksCalls *prometheus.CounterVec
	// watchCtx bounds the OCM watches; trigger asks for a scan of a source soon.
	watchCtx context.Context
	trigger  func(sourceID string)
	logger   *slog.Logger
}

// closeless adapts a stateless Lister.
type closeless struct{ scanner.Lister }

func (closeless) Close() {}

// lister returns the Lister of a source. Every lister reads the source's Secret or ConfigMap at
// every scan, so a fixed Secret takes effect on the next scan without a restart.
func (s *sourceSpec) lister(d listerDeps) sourceLister {
	ref := s.Ref
	switch ref.Kind {
	case events.SourceKindRancher:
		return rancherLister{spec: s, d: d}
	case events.SourceKindEKS:
		return newIdentifiedPages("eks:", eks.NewLister(eks.Options{
			Regions:            s.Regions,
			RedescribeInterval: d.cfg.EKSRedescribeInterval,
			Calls:              d.eksCalls,
			Endpoint:           d.cfg.EKSEndpoint,
			STSEndpoint:        d.cfg.EKSSTSEndpoint,
			// No Secret: the SDK's default chain.
			Credentials: func(ctx context.Context) (eks.Credentials, error) {
				return secretCredentials(ctx, d.kube, ref, true, events.ParseEKSSecret)
			},
		}))
	case events.SourceKindGKE:
		return closeless{identified{"gke:", gke.NewLister(gke.Options{
			Projects: s.Projects,
			Filters:  s.Filters,
			Filter:   s.Filter,
			Calls:    d.gkeCalls,
			Endpoint: d.cfg.GKEEndpoint,
			// No Secret: application default credentials.
			Credentials: func(ctx context.Context) (gke.Credentials, error) {
				return secretCredentials(ctx, d.kube, ref, true, events.ParseGKESecret)
			},
		})}}
	case events.SourceKindAKS:
		return s.aksLister(d)
	case events.SourceKindOCM:
		return newHubLister(ocmKind, ref, d)
	case events.SourceKindClusterProfile:
		return newHubLister(clusterProfileKind(s.Namespaces), ref, d)
	default:
		return closeless{scanner.ListerFunc(func(ctx context.Context) ([]events.Cluster, error) {
			clusters, err := staticClusters(ctx, d.kube, ref.SecretNamespace, s.ConfigMap)
			stampIdentity(clusters, "static:"+ref.SecretNamespace+"/"+s.ConfigMap+"/")
			return clusters, err
		})}
	}
}

// rancherLister lists a Rancher source page by page (scanner.PagedLister), reading its Secret
// at every listing. It is not wrapped in closeless, which would hide ListPages from the scanner.
type rancherLister struct {
	spec *sourceSpec
	d    listerDeps
}

func (l rancherLister) List(ctx context.Context) ([]events.Cluster, error) {
	return scanner.ListAll(ctx, l.ListPages)
}

func (l rancherLister) ListPages(ctx context.Context, each func([]events.Cluster) error) error {
	creds, err := secretCredentials(ctx, l.d.kube, l.spec.Ref, false, events.ParseRancherSecret)
	if err != nil {
		return err
	}
	rl := &rancher.Lister{Creds: creds, Filters: l.spec.Filters, IgnoreFields: l.d.cfg.RancherIgnoreFields, ExtraFields: l.d.cfg.RancherExtraFields}
	identity := "rancher:" + creds.URL.String() + "/"
	return rl.ListPages(ctx, func(page []events.Cluster) error {
		stampIdentity(page, identity)
		return each(page)
	})
}

func (rancherLister) Close() {}

var _ scanner.PagedLister = rancherLister{}

// identified stamps the identity prefix+Key on every cluster its Lister lists: the key of an
// eks (ARN) or gke (projects/p/locations/l/clusters/n) cluster already names it at its provider,
// whatever credentials or filters list it.
type identified struct {
	prefix string
	scanner.Lister
}

func (l identified) List(ctx context.Context) ([]events.Cluster, error) {
	clusters, err := l.Lister.List(ctx)
	stampIdentity(clusters, l.prefix)
	return clusters, err
}

// identifiedPages is identified for a lister that lists page by page (eks, aks): the scanner
// sees its ListPages, so it diffs one page at a time. List is identified's.
type identifiedPages struct {
	identified
	pages scanner.PagedLister
}

func newIdentifiedPages(prefix string, l scanner.PagedLister) identifiedPages {
	return identifiedPages{identified{prefix, l}, l}
}

func (l identifiedPages) ListPages(ctx context.Context, each func([]events.Cluster) error) error {
	return l.pages.ListPages(ctx, func(page []events.Cluster) error {
		stampIdentity(page, l.prefix)
		return each(page)
	})
}

func (identifiedPages) Close() {}

var _ scanner.PagedLister = identifiedPages{}

// legacyNames returns how versions before 64-bit name suffixes named the clusters of a source
// kind, for the kinds whose names they normalised with 32 bits (eks, gke; scanner.Source's
// LegacyName), so that a cluster keeps the name it was published under. Rancher, static and OCM
// names were never normalised by the scanner: nil.
func legacyNames(kind string) func(events.Cluster) string {
	switch kind {
	case events.SourceKindEKS:
		return eks.LegacyName
	case events.SourceKindGKE:
		return gke.LegacyName
	}
	return nil
}

// stampIdentity sets each cluster's Identity to prefix+Key: prefix names the provider (the kind
// and, where the key is only unique there, the Rancher server, the OCM hub or the static
// ConfigMap), never the Secret a rule reads it with, so a cluster listed through two Secrets
// of one Rancher has one identity.
func stampIdentity(clusters []events.Cluster, prefix string) {
	for i := range clusters {
		clusters[i].Identity = prefix + clusters[i].Key
	}
}

// sourceSecret reads the Secret of an eks, gke or ocm source, for which a Secret is optional:
// found is false when the Secret is absent and the rule named none (the default name, the
// kind), which means the ambient credentials (AWS default chain, Google application default
// credentials, the in-cluster hub). A Secret the rule names explicitly must exist
// (SecretInvalid); a failed read is ListFailed. Messages never contain Secret data.
func sourceSecret(ctx context.Context, kube client.Reader, ref events.SourceRef) (data map[string][]byte, found bool, err error) {
	var secret corev1.Secret
	err = kube.Get(ctx, client.ObjectKey{Namespace: ref.SecretNamespace, Name: ref.SecretName}, &secret)
	switch {
	case apierrors.IsNotFound(err) && ref.SecretName == ref.Kind:
		return nil, false, nil
	case apierrors.IsNotFound(err):
		return nil, false, scanner.Degradedf(events.DegradedSecretInvalid, "Secret %s/%s not found", ref.SecretNamespace, ref.SecretName)
	case err != nil:
		return nil, false, scanner.Degradedf(events.DegradedListFailed, "read Secret %s/%s: %w", ref.SecretNamespace, ref.SecretName, err)
	}
	return secret.Data, true, nil
}

// secretCredentials reads and parses the source Secret of ref. With optional (eks, gke), an
// absent Secret that the rule did not name yields the zero value: the ambient credentials. A
// missing required or named Secret, or a malformed one, is degraded with reason SecretInvalid;
// the message names the Secret and the key, never a value.
func secretCredentials[C any](ctx context.Context, kube client.Reader, ref events.SourceRef, optional bool, parse func(map[string][]byte) (C, error)) (C, error) {
	var zero C
	data, found, err := sourceSecret(ctx, kube, ref)
	switch {
	case err != nil:
		return zero, err
	case !found && optional:
		return zero, nil
	case !found:
		return zero, scanner.Degradedf(events.DegradedSecretInvalid, "Secret %s/%s not found", ref.SecretNamespace, ref.SecretName)
	}
	creds, err := parse(data)
	if err != nil {
		return zero, scanner.Degradedf(events.DegradedSecretInvalid, "Secret %s/%s: %w", ref.SecretNamespace, ref.SecretName, err)
	}
	return creds, nil
}

// staticClusters reads a static source's ConfigMap.
func staticClusters(ctx context.Context, kube client.Reader, namespace, name string) ([]events.Cluster, error) {
	var cm corev1.ConfigMap
	err := kube.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &cm)
	switch {
	case apierrors.IsNotFound(err):
		return nil, scanner.Degradedf(events.DegradedListFailed, "ConfigMap %s/%s not found", namespace, name)
	case err != nil:
		return nil, scanner.Degradedf(events.DegradedListFailed, "read ConfigMap %s/%s: %w", namespace, name, err)
	}
	data, ok := cm.Data[static.DataKey]
	if !ok {
		return nil, scanner.Degradedf(events.DegradedListFailed, "ConfigMap %s/%s has no key %s", namespace, name, static.DataKey)
	}
	clusters, err := static.Parse([]byte(data))
	if err != nil {
		return nil, scanner.Degraded(events.DegradedListFailed, fmt.Errorf("ConfigMap %s/%s: %w", namespace, name, err))
	}
	return clusters, nil
}
