package main

// Tenancy. A ClusterRule in OPERATOR_NAMESPACE is trusted, as the original operator's rules were.
// A rule in any other namespace acts only within a ClusterRuleGrant in OPERATOR_NAMESPACE that
// covers its namespace (pkg/api/v1beta1 ClusterRuleGrant): its source and Secret must be the
// grant's, its clusters are narrowed to the grant's cluster selector, its enforcements' rendered
// repositories and namespaces and its trigger endpoints must match the grant's patterns.
//
// Of the grants that cover a namespace, a rule acts under the first one by name that allows its
// source (and Secret): a rule names no grant, so the choice must be deterministic, and grants of
// one namespace usually differ by source. A rule no grant allows is NotPermitted: it selects no
// cluster (so its status names none) and gets no install. Whatever it had installed becomes a
// selection removal and goes through the rule edit breaker (breaker.go), so removing or narrowing
// a grant never mass-deletes: over the cap the removals are held until the operator releases them
// (the release annotation counts only in OPERATOR_NAMESPACE, so a tenant cannot release its own).
//
// Enforcement is not the only check: install intents of a granted rule carry the grant
// (events.Grant), and argo-syncer puts their Applications into an AppProject per grant and
// cluster with the grant's repositories, namespaces and cluster-scoped kinds, which Argo CD
// enforces on every sync.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// grantState is the grant a tenant rule acts under, compiled.
type grantState struct {
	name string
	spec v1beta1.ClusterRuleGrantSpec
	// selector is the grant's cluster selector; nil selects every cluster of its sources.
	selector labels.Selector
	// event is what install intents carry (events.Grant).
	event *events.Grant
	// fingerprint changes whenever what the grant allows changes: a rule evaluates again, and
	// its pairs are sent again so that argo-syncer rewrites their AppProject.
	fingerprint string
}

// errNotPermitted marks why a rule outside OPERATOR_NAMESPACE may not do something.
var errNotPermitted = errors.New("not permitted")

// notPermitted is an errNotPermitted with a message for the rule's status.
func notPermitted(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errNotPermitted, fmt.Sprintf(format, args...))
}

// compileRule compiles a ClusterRule as the controller sees it: ruleFromSpec, and for a rule
// outside OPERATOR_NAMESPACE the grant it acts under, chosen from grants (those in
// OPERATOR_NAMESPACE). A rule without one, or one that asks for more than its grant allows, gets
// r.denied.
func compileRule(cr *v1beta1.ClusterRule, operatorNamespace string, grants []v1beta1.ClusterRuleGrant) *ruleState {
	r := ruleFromSpec(cr, operatorNamespace)
	if cr.Namespace == operatorNamespace {
		return r
	}
	r.tenant = true
	if r.invalid != nil {
		return r // InvalidSpec: keeps what it has, selects nothing new
	}
	g, err := pickGrant(cr.Namespace, r.sel.source, operatorNamespace, grants)
	if err == nil {
		err = g.permitsRule(r, cr)
	}
	if err != nil {
		r.deny(err)
		return r
	}
	r.grant = g
	r.grantKey = g.fingerprint
	r.sel.grant = g.selector
	return r
}

// deny makes r a rule that selects nothing, because of err.
func (r *ruleState) deny(err error) {
	r.denied = err
	r.grant = nil
	r.grantKey = "denied: " + err.Error()
	r.sel.denyAll = true
}

// pickGrant returns the first grant by name that covers namespace ns and allows the source.
func pickGrant(ns string, src events.SourceRef, operatorNamespace string, grants []v1beta1.ClusterRuleGrant) (*grantState, error) {
	sorted := slices.Clone(grants)
	slices.SortFunc(sorted, func(a, b v1beta1.ClusterRuleGrant) int { return strings.Compare(a.Name, b.Name) })
	var covering []string
	var invalid []string
	for i := range sorted {
		g := &sorted[i]
		if g.Namespace != operatorNamespace || !g.DeletionTimestamp.IsZero() || !g.Spec.Covers(ns) {
			continue
		}
		covering = append(covering, g.Name)
		if !g.Spec.PermitsSource(src.Kind, src.SecretName) {
			continue
		}
		gs, err := compileGrant(g)
		if err != nil {
			invalid = append(invalid, fmt.Sprintf("%s (%v)", g.Name, err))
			continue
		}
		return gs, nil
	}
	secret := src.SecretName
	if secret == "" {
		secret = src.Kind
	}
	switch {
	case len(invalid) > 0:
		return nil, notPermitted("the ClusterRuleGrants that would allow source %s with Secret %s are invalid: %s", src.Kind, secret, strings.Join(invalid, "; "))
	case len(covering) == 0:
		return nil, notPermitted("no ClusterRuleGrant in %s covers namespace %s; rules outside %s act only within a grant", operatorNamespace, ns, operatorNamespace)
	}
	return nil, notPermitted("no ClusterRuleGrant covering namespace %s allows source %s with Secret %s (covering: %s)", ns, src.Kind, secret, strings.Join(covering, ", "))
}

// compileGrant compiles a grant; a pattern or selector that does not compile makes it unusable.
func compileGrant(g *v1beta1.ClusterRuleGrant) (*grantState, error) {
	if err := g.Spec.Validate(); err != nil {
		return nil, err
	}
	gs := &grantState{name: g.Name, spec: g.Spec, event: &events.Grant{Name: g.Name,
		SourceRepos: slices.Clone(g.Spec.SourceRepos), DestinationNamespaces: slices.Clone(g.Spec.DestinationNamespaces)}}
	for _, gk := range g.Spec.ClusterResourceWhitelist {
		gs.event.ClusterResources = append(gs.event.ClusterResources, events.GroupKind{Group: gk.Group, Kind: gk.Kind})
	}
	if g.Spec.ClusterSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(g.Spec.ClusterSelector)
		if err != nil {
			return nil, fmt.Errorf("spec.clusterSelector: %w", err)
		}
		gs.selector = sel
	}
	b, _ := json.Marshal(struct {
		Name string                       `json:"name"`
		Spec v1beta1.ClusterRuleGrantSpec `json:"spec"`
	}{g.Name, g.Spec})
	sum := sha256.Sum256(b)
	gs.fingerprint = hex.EncodeToString(sum[:8])
	return gs, nil
}

// permitsRule checks what the rule's spec says without rendering: its trigger endpoints, and
// for a rule without templates its enforcements.
func (g *grantState) permitsRule(r *ruleState, cr *v1beta1.ClusterRule) error {
	if t := cr.Spec.Triggers; t != nil {
		for phase, tr := range map[string]*v1beta1.Trigger{events.PhaseBeforeInstall: t.BeforeInstall, events.PhaseAfterInstall: t.AfterInstall} {
			if tr != nil && !g.spec.PermitsEndpoint(tr.Endpoint) {
				// The endpoint may hold a token: the status shows it redacted.
				return notPermitted("ClusterRuleGrant %s does not allow the %s endpoint %s", g.name, phase, events.RedactURL(tr.Endpoint))
			}
		}
	}
	if !r.compiled.templated {
		return g.permitsEnforcements(r.static)
	}
	return nil
}

// permitsEnforcements checks rendered enforcements: repository and destination namespace.
func (g *grantState) permitsEnforcements(enfs []events.Enforcement) error {
	for i := range enfs {
		en := &enfs[i]
		if !g.spec.PermitsRepo(en.Repo) {
			return notPermitted("ClusterRuleGrant %s does not allow repository %s (enforcement %s)", g.name, en.Repo, en.Name)
		}
		ns := en.Namespace
		if ns == "" {
			ns = "default" // where argo-syncer installs an enforcement without a namespace
		}
		if !g.spec.PermitsNamespace(ns) {
			return notPermitted("ClusterRuleGrant %s does not allow destination namespace %s (enforcement %s)", g.name, ns, en.Name)
		}
	}
	return nil
}

// specHashFor is the spec hash of an enforcement of r: specHash, plus the grant's fingerprint
// for a granted rule, so that a changed grant sends the pair's installs again and argo-syncer
// rewrites the AppProject they live in.
func (r *ruleState) specHashFor(en *events.Enforcement, clusterURL string) string {
	h := specHash(en, clusterURL)
	if r.grant == nil {
		return h
	}
	sum := sha256.Sum256([]byte(h + "\x00" + r.grant.fingerprint))
	return hex.EncodeToString(sum[:8])
}

// grantFingerprint is the fingerprint of r's grant, "" for a rule of OPERATOR_NAMESPACE.
func (r *ruleState) grantFingerprint() string {
	if r.grant == nil {
		return ""
	}
	return r.grant.fingerprint
}

// grantEvent is what r's install intents carry of its grant; nil for a rule of OPERATOR_NAMESPACE.
func (r *ruleState) grantEvent() *events.Grant {
	if r.grant == nil {
		return nil
	}
	return r.grant.event
}

// renderError records why the render of a pair cannot be used: a template error, or rendered
// values its grant does not allow.
func (r *ruleState) renderError(cid, cluster string, err error) {
	if errors.Is(err, errNotPermitted) {
		r.deniedRenders[cid] = [2]string{cluster, err.Error()}
		delete(r.templateErrors, cid)
		return
	}
	r.templateErrors[cid] = [2]string{cluster, err.Error()}
	delete(r.deniedRenders, cid)
}

// clearRenderError forgets the render error of a pair.
func (r *ruleState) clearRenderError(cid string) {
	delete(r.templateErrors, cid)
	delete(r.deniedRenders, cid)
}
