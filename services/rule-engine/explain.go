package main

// Explain: which ClusterRules give their enforcements to a cluster now, and why the others do not
// (`enforcement explain cluster NAME`, after the cluster's history from the stream), and which
// clusters a rule gives them to now (`enforcement explain rule NAMESPACE/NAME`: explainRule, the
// preview of the live rule as it is). Like a
// preview it runs on a scratch engine loaded from the state bucket, with the engine's own
// selection code (selection.selects and whyNot) and each live rule compiled with its
// ClusterRuleGrant as the controller compiles it (compileRule), so a verdict is the one the
// leader would reach. It writes nothing: the store is read only, renders are read from the render
// cache or made and not cached.
//
// The answer covers every rule of the namespaces the engine watches, tenants' included: the
// command line is an operator tool (NATS credentials), not a tenant's.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// explainCluster returns, for every cluster named name in the engine's view, the verdict of every
// live ClusterRule the engine watches. A name no source lists gets no cluster, not an error.
func (p *previewer) explainCluster(ctx context.Context, name string) (*events.ExplainClusterResult, error) {
	if strings.TrimSpace(name) == "" {
		return nil, userError{errors.New("the cluster name is empty")}
	}
	rules, err := p.liveRules(ctx)
	if err != nil {
		return nil, err
	}
	e, err := p.scratchEngine(ctx)
	if err != nil {
		return nil, err
	}
	res := &events.ExplainClusterResult{Cluster: name}
	err = e.evaluate(ctx, func(rs *renders) error {
		res.Clusters = []events.ExplainedCluster{}
		for _, cid := range e.clustersNamed(name) {
			c := &e.clusters[cid].Cluster
			ec := events.ExplainedCluster{Source: c.Source, Identity: c.Identity, Labels: c.Labels, State: c.State, Eligible: c.Eligible,
				Rules: []events.RuleVerdict{}}
			for _, lr := range rules {
				ec.Rules = append(ec.Rules, e.verdict(lr, cid, rs))
			}
			res.Clusters = append(res.Clusters, ec)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// liveRule is a ClusterRule as the API server has it now: compiled, or being deleted.
type liveRule struct {
	ref      events.RuleRef
	deleting bool
	rule     *ruleState // nil when deleting
}

// liveRules reads the ClusterRules of the watched namespaces (all when WATCH_NAMESPACES is empty)
// and compiles each with the ClusterRuleGrants of OPERATOR_NAMESPACE, by namespace and name.
func (p *previewer) liveRules(ctx context.Context) ([]liveRule, error) {
	var items []v1beta1.ClusterRule
	namespaces := p.watchNamespaces
	if len(namespaces) == 0 {
		namespaces = []string{""} // every namespace
	}
	for _, ns := range namespaces {
		var list v1beta1.ClusterRuleList
		if err := p.rules.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return nil, fmt.Errorf("list ClusterRules: %w", err)
		}
		items = append(items, list.Items...)
	}
	var grants v1beta1.ClusterRuleGrantList
	if err := p.rules.List(ctx, &grants, client.InNamespace(p.operatorNamespace)); err != nil {
		return nil, fmt.Errorf("list ClusterRuleGrants in %s: %w", p.operatorNamespace, err)
	}
	slices.SortFunc(items, func(a, b v1beta1.ClusterRule) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	out := make([]liveRule, 0, len(items))
	for i := range items {
		cr := &items[i]
		lr := liveRule{ref: events.RuleRef{Namespace: cr.Namespace, Name: cr.Name, UID: string(cr.UID), Generation: cr.Generation}}
		if cr.DeletionTimestamp.IsZero() {
			lr.rule = compileRule(cr, p.operatorNamespace, grants.Items)
		} else {
			lr.deleting = true
		}
		out = append(out, lr)
	}
	return out, nil
}

// clustersNamed returns the ids of the clusters of the view named name, by source id and identity.
func (e *engine) clustersNamed(name string) []string {
	var out []string
	for cid, rec := range e.clusters {
		if rec.Cluster.Name == name {
			out = append(out, cid)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		ca, cb := &e.clusters[a].Cluster, &e.clusters[b].Cluster
		return strings.Compare(ca.Source.ID+"\x00"+ca.Identity+"\x00"+a, cb.Source.ID+"\x00"+cb.Identity+"\x00"+b)
	})
	return out
}

// verdict says whether the rule gives its enforcements to cluster cid now and, when not, why:
// the tests of evalPair in its order, with whyNot's wording for the selection. A templated rule
// that selects the cluster is rendered for it (through rs, outside the mutex, as evaluate does).
func (e *engine) verdict(lr liveRule, cid string, rs *renders) events.RuleVerdict {
	rec := e.clusters[cid]
	c := &rec.Cluster
	v := events.RuleVerdict{Rule: lr.ref, Installed: e.installedBy(lr.ref.String(), cid)}
	r := lr.rule
	switch {
	case lr.deleting:
		v.Reason = "the rule is being deleted"
	case r.invalid != nil:
		v.Reason = "the rule is invalid (its status says so): " + r.invalid.Error()
	case r.sel.denyAll:
		v.Reason = r.sel.whyNot(c) + ": " + strings.TrimPrefix(r.denied.Error(), errNotPermitted.Error()+": ")
	case c.Source.ID != r.sel.source.ID:
		v.Reason = fmt.Sprintf("reads another source (%s %s)", r.sel.source.Kind, r.sel.source.ID)
	case !r.sel.selects(c):
		v.Reason = r.sel.whyNot(c)
		if e.isHeld(r.key, cid) {
			v.Reason += "; the rule edit breaker holds its removal until it is released"
		}
	case !c.Eligible:
		v.Reason = "not eligible: " + valueOrDash(c.State)
	default:
		cv := &clusterVars{rec: rec}
		enfs, ok, err := r.rendered(cid, r.renderKey(cv), cv, &change{renders: rs})
		switch {
		case !ok:
			// Rendered outside the mutex; evaluate asks again.
		case errors.Is(err, errNotPermitted):
			v.Reason = "selected, but its render for the cluster is refused: " + err.Error()
		case err != nil:
			v.Reason = "selected, but its render for the cluster fails: " + err.Error()
		default:
			v.Matches = true
			for _, en := range enfs {
				v.Installs = append(v.Installs, en.Name)
			}
		}
	}
	return v
}

// installedBy returns, sorted, the enforcements the rule's install record holds for cluster cid
// (none once handed over to another cluster of its name).
func (e *engine) installedBy(rule, cid string) []string {
	p := e.pairs[rule][cid]
	if p == nil || p.handedOverTo() != "" {
		return nil
	}
	return p.Enforcements.names()
}

// explainRule returns the live rule's verdict on every cluster of its source now: the preview's
// answer for the rule as it is (previewCompiled with the live rule as both the candidate and the
// live one), its clusters, held removals and template errors. A rule outside OPERATOR_NAMESPACE
// gets no cluster named that it may not target (withholdUntargetable), as its status names none.
func (p *previewer) explainRule(ctx context.Context, ns, name string) (*events.ExplainRuleResult, error) {
	if strings.TrimSpace(ns) == "" || strings.TrimSpace(name) == "" {
		return nil, userError{errors.New("the rule's namespace and name are both required")}
	}
	if err := p.checkWatched(ns); err != nil {
		return nil, err
	}
	var cr v1beta1.ClusterRule
	err := p.rules.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cr)
	switch {
	case apierrors.IsNotFound(err):
		return nil, notFoundError{fmt.Errorf("no ClusterRule %s/%s on the API server", ns, name)}
	case err != nil:
		return nil, fmt.Errorf("read ClusterRule %s/%s: %w", ns, name, err)
	}
	res := &events.ExplainRuleResult{Rule: events.RuleRef{Namespace: ns, Name: name, UID: string(cr.UID), Generation: cr.Generation},
		Clusters: []events.PreviewCluster{}}
	if !cr.DeletionTimestamp.IsZero() {
		res.Inactive = "the rule is being deleted"
		return res, nil
	}
	r, err := compileWithGrants(ctx, p.rules, &cr, p.operatorNamespace)
	if err != nil {
		return nil, err
	}
	if r.sel != nil {
		res.Source = r.sel.source
	}
	if r.invalid != nil {
		res.Inactive = "the rule is invalid (its status says so): " + r.invalid.Error()
		//nolint:nilerr // an invalid rule is the answer (it selects nothing), not a failure of the request
		return res, nil
	}
	pr := &events.PreviewResult{Existing: true, LiveGeneration: cr.Generation}
	if err := p.previewCompiled(ctx, r, r, pr); err != nil {
		return nil, err
	}
	res.Held, res.TemplateErrors, res.Rollout = pr.Held, pr.TemplateErrors, pr.Rollout
	res.Clusters, res.Withheld = withholdUntargetable(r, pr.Clusters)
	if r.tenant && res.Held != nil {
		res.Held.Clusters = nil // heldMessage names none for such a rule either
	}
	return res, nil
}

// withholdUntargetable splits the preview's clusters of rule r into those the answer may name
// and, for a rule outside OPERATOR_NAMESPACE, the counts by reason of those its grant does not
// let it target (no grant permits the rule, with the reason why, or outside the grant's cluster
// selector). A rule of OPERATOR_NAMESPACE may target every cluster: all are named.
func withholdUntargetable(r *ruleState, clusters []events.PreviewCluster) ([]events.PreviewCluster, []events.WithheldClusters) {
	named := []events.PreviewCluster{}
	if !r.tenant {
		return append(named, clusters...), nil
	}
	counts := map[string]int{}
	for _, c := range clusters {
		switch c.Reason {
		case reasonNotPermitted:
			counts[c.Reason+": "+strings.TrimPrefix(r.denied.Error(), errNotPermitted.Error()+": ")]++
		case reasonOutsideGrant:
			counts[c.Reason]++
		default:
			named = append(named, c)
		}
	}
	var withheld []events.WithheldClusters
	for _, reason := range slices.Sorted(maps.Keys(counts)) {
		withheld = append(withheld, events.WithheldClusters{Reason: reason, Count: counts[reason]})
	}
	return named, withheld
}
