package main

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/rancher"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/static"
)

// sourceSpec is one distinct source referenced by the ClusterRules, with everything needed to
// list it. Rules with the same kind, Secret and filters share one sourceSpec.
type sourceSpec struct {
	Ref events.SourceRef
	// Filters are the Rancher query parameters.
	Filters map[string]string
	// ConfigMap is the static source's ConfigMap.
	ConfigMap string
	// Rules names the rules (namespace/name) using the source.
	Rules []string
	// ReleaseThrough is the highest valid release annotation among those rules.
	ReleaseThrough uint64
}

// sourceOf derives a rule's source. ok is false for a kind this scanner does not list.
//
// rule-engine must derive the same SourceRef.ID from a rule: kind, OPERATOR_NAMESPACE,
// spec.source.secretName (default: the kind), and the filters: rancher's spec.source.rancher.filters;
// for static none with the default ConfigMap, and {"configMap": <name>} with any other, so two
// ConfigMaps are two sources while the default keeps the id rule-engine computes without filters.
func sourceOf(rule *v1beta1.ClusterRule, operatorNamespace string) (spec sourceSpec, ok bool) {
	src := rule.Spec.Source
	var kind string
	var filters map[string]string
	switch {
	case src.Rancher != nil:
		kind = rancher.Kind
		filters = src.Rancher.Filters
		spec.Filters = filters
	case src.Static != nil:
		kind = static.Kind
		spec.ConfigMap = src.Static.ConfigMap
		if spec.ConfigMap == "" {
			spec.ConfigMap = static.DefaultConfigMap
		}
		if spec.ConfigMap != static.DefaultConfigMap {
			filters = map[string]string{"configMap": spec.ConfigMap}
		}
	default:
		// Not built yet: the eks, gke and ocm sources (their own issues).
		return spec, false
	}
	secret := src.SecretName
	if secret == "" {
		secret = kind
	}
	spec.Ref = events.SourceRef{
		Kind:            kind,
		ID:              scanner.SourceID(kind, operatorNamespace, secret, filters),
		SecretNamespace: operatorNamespace,
		SecretName:      secret,
	}
	return spec, true
}

// sourcesFromRules groups the rules by source, in source id order. A malformed release
// annotation is logged and ignored (it releases nothing).
func sourcesFromRules(rules []v1beta1.ClusterRule, operatorNamespace string, logger *slog.Logger) []*sourceSpec {
	byID := map[string]*sourceSpec{}
	for i := range rules {
		rule := &rules[i]
		spec, ok := sourceOf(rule, operatorNamespace)
		if !ok {
			logger.Debug("Skipping rule: its source kind is not scanned by this scanner", "rule", rule.Namespace+"/"+rule.Name)
			continue
		}
		cur, seen := byID[spec.Ref.ID]
		if !seen {
			cur = &spec
			byID[spec.Ref.ID] = cur
		}
		cur.Rules = append(cur.Rules, rule.Namespace+"/"+rule.Name)
		if v, set := rule.Annotations[scanner.ReleaseAnnotation]; set {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				logger.Warn("Ignoring release annotation: want a scan number", "rule", rule.Namespace+"/"+rule.Name,
					"annotation", scanner.ReleaseAnnotation, "value", v)
				continue
			}
			cur.ReleaseThrough = max(cur.ReleaseThrough, n)
		}
	}
	out := make([]*sourceSpec, 0, len(byID))
	for _, s := range byID {
		sort.Strings(s.Rules)
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ref.ID < out[j].Ref.ID })
	return out
}

// lister returns the Lister of a source: it reads the source's Secret or ConfigMap at every scan,
// so a fixed Secret takes effect on the next scan without a restart.
func (s *sourceSpec) lister(kube client.Reader, cfg config) scanner.Lister {
	switch s.Ref.Kind {
	case rancher.Kind:
		return scanner.ListerFunc(func(ctx context.Context) ([]events.Cluster, error) {
			creds, err := rancherCredentials(ctx, kube, s.Ref.SecretNamespace, s.Ref.SecretName)
			if err != nil {
				return nil, err
			}
			l := &rancher.Lister{Creds: creds, Filters: s.Filters, IgnoreFields: cfg.RancherIgnoreFields}
			return l.List(ctx)
		})
	default:
		return scanner.ListerFunc(func(ctx context.Context) ([]events.Cluster, error) {
			return staticClusters(ctx, kube, s.Ref.SecretNamespace, s.ConfigMap)
		})
	}
}

// rancherCredentials reads a Rancher source Secret. A missing or malformed Secret is degraded
// with reason SecretInvalid; the message names the Secret and the key, never a value.
func rancherCredentials(ctx context.Context, kube client.Reader, namespace, name string) (rancher.Credentials, error) {
	var secret corev1.Secret
	err := kube.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &secret)
	switch {
	case apierrors.IsNotFound(err):
		return rancher.Credentials{}, scanner.Degradedf(events.DegradedSecretInvalid, "Secret %s/%s not found", namespace, name)
	case err != nil:
		return rancher.Credentials{}, scanner.Degradedf(events.DegradedListFailed, "read Secret %s/%s: %w", namespace, name, err)
	}
	creds, err := rancher.ParseSecret(secret.Data)
	if err != nil {
		return rancher.Credentials{}, scanner.Degradedf(events.DegradedSecretInvalid, "Secret %s/%s: %w", namespace, name, err)
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
