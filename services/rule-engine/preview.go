package main

// Preview: what applying a ClusterRule would do, before it is applied (`enforcement preview -f
// rule.yaml`). The answer comes from the engine's own decision code (evalRule, the rule edit
// breaker) run on a scratch engine loaded from the state bucket: the cluster view, the install
// records, the held removals and the sources' listings are all there, written before each event
// is acknowledged, so the bucket is what the leader decides on. Every replica can therefore
// answer, standbys included, and the leader's mutex is never taken: a preview costs one read of
// the bucket and the renders of the candidate rule, and cannot delay the leader's decisions.
// The scratch engine's store refuses every write, and its publisher publishes nothing: a preview
// changes no record, caches no render and sends no intent.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
	"github.com/nats-io/nats.go/micro"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// previewTimeout bounds one preview: the state read and the renders (each within
// TEMPLATE_RENDER_TIMEOUT, renderParallel at a time).
const previewTimeout = 2 * time.Minute

// previewer answers preview requests. It shares the live engine's store (read only), renderer
// and settings, never its state.
type previewer struct {
	store              store
	renderer           *Renderer
	degradedTTL        time.Duration
	maxRemovalFraction float64
	operatorNamespace  string
	watchNamespaces    []string
	// rules reads the live ClusterRule of the previewed name (its uid and generation).
	rules client.Reader
	// schema is the ClusterRule CRD's, applied to every manifest (schema.go).
	schema *ruleSchema
}

// userError is a request that cannot be previewed as it is: the reply says why (code 400).
type userError struct{ error }

// Unwrap returns the reason, so that errors.As finds the API server's kind of error in it.
func (e userError) Unwrap() error { return e.error }

// notFoundError is a request about something that does not exist: the reply says what (code 404).
type notFoundError struct{ error }

// serveAPI registers the rule engine's micro service (events.RuleEngineAPIName) with its preview,
// explain-cluster and explain-rule endpoints, on every replica, and stops it at the beginning of the service's stop.
func serveAPI(svc *service.Service, eng *engine, cfg config) error {
	scheme := runtime.NewScheme()
	if err := v1beta1.AddToScheme(scheme); err != nil {
		return err
	}
	rs, err := clusterRuleSchema()
	if err != nil {
		return err
	}
	// A direct client: a standby's manager (and its cache) has not started.
	rules, err := client.New(svc.Kube, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("preview client: %w", err)
	}
	p := &previewer{store: eng.store, renderer: eng.renderer, degradedTTL: eng.degradedTTL, maxRemovalFraction: eng.maxRemovalFraction,
		operatorNamespace: cfg.OperatorNamespace, watchNamespaces: cfg.WatchNamespaces, rules: rules, schema: rs}
	ms, err := micro.AddService(svc.NATS, micro.Config{Name: events.RuleEngineAPIName, Version: "1.0.0",
		Description: "Enforcement rule engine: previews what a ClusterRule would do, explains which rules match a cluster and which clusters a rule matches"})
	if err != nil {
		return fmt.Errorf("register micro service %s: %w", events.RuleEngineAPIName, err)
	}
	svc.OnStop(func() { _ = ms.Stop() })
	err = ms.AddEndpoint("preview", micro.ContextHandler(svc.Context(), func(ctx context.Context, req micro.Request) {
		var in events.PreviewRequest
		answer(ctx, svc.Logger, req, &in, func(ctx context.Context) (any, error) { return p.preview(ctx, []byte(in.Rule)) })
	}), micro.WithEndpointSubject(events.PreviewSubject))
	if err != nil {
		_ = ms.Stop()
		return fmt.Errorf("register endpoint %s: %w", events.PreviewSubject, err)
	}
	err = ms.AddEndpoint("explain-cluster", micro.ContextHandler(svc.Context(), func(ctx context.Context, req micro.Request) {
		var in events.ExplainClusterRequest
		answer(ctx, svc.Logger, req, &in, func(ctx context.Context) (any, error) { return p.explainCluster(ctx, in.Cluster) })
	}), micro.WithEndpointSubject(events.ExplainClusterSubject))
	if err != nil {
		_ = ms.Stop()
		return fmt.Errorf("register endpoint %s: %w", events.ExplainClusterSubject, err)
	}
	err = ms.AddEndpoint("explain-rule", micro.ContextHandler(svc.Context(), func(ctx context.Context, req micro.Request) {
		var in events.ExplainRuleRequest
		answer(ctx, svc.Logger, req, &in, func(ctx context.Context) (any, error) { return p.explainRule(ctx, in.Namespace, in.Name) })
	}), micro.WithEndpointSubject(events.ExplainRuleSubject))
	if err != nil {
		_ = ms.Stop()
		return fmt.Errorf("register endpoint %s: %w", events.ExplainRuleSubject, err)
	}
	return nil
}

// answer decodes a request into in, then replies with what compute returns, within
// previewTimeout: a request that does not decode or a userError is a 400 with the reason, a
// notFoundError a 404, any other error a 500.
func answer(ctx context.Context, log *slog.Logger, req micro.Request, in any, compute func(context.Context) (any, error)) {
	ctx, cancel := context.WithTimeout(ctx, previewTimeout)
	defer cancel()
	if err := json.Unmarshal(req.Data(), in); err != nil {
		_ = req.Error("400", "request: "+err.Error(), nil)
		return
	}
	res, err := compute(ctx)
	var ue userError
	var nf notFoundError
	switch {
	case errors.As(err, &ue):
		_ = req.Error("400", ue.Error(), nil)
	case errors.As(err, &nf):
		_ = req.Error("404", nf.Error(), nil)
	case err != nil:
		log.Warn("API request failed", "subject", req.Subject(), "error", err)
		_ = req.Error("500", err.Error(), nil)
	default:
		_ = req.RespondJSON(res)
	}
}

// parseRule reads one ClusterRule manifest as the API server would on create (schema.go): unknown
// fields are errors, as the API server's strict field validation makes them, so that a misspelt
// field is not previewed as absent; the CRD's defaults are filled in, so that the spec is the
// one the applied rule will have; and the CRD's validation runs, so that a rule the API server
// would refuse is refused here, with its message.
func parseRule(ctx context.Context, rs *ruleSchema, manifest []byte) (*v1beta1.ClusterRule, error) {
	if len(bytes.TrimSpace(manifest)) == 0 {
		return nil, userError{errors.New("the rule manifest is empty")}
	}
	if docs := splitDocuments(manifest); len(docs) > 1 {
		return nil, userError{fmt.Errorf("the manifest holds %d documents; preview takes one ClusterRule", len(docs))}
	}
	js, err := yaml.YAMLToJSONStrict(manifest)
	if err != nil {
		return nil, userError{fmt.Errorf("read the ClusterRule: %w", err)}
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(js, &obj); err != nil || obj == nil {
		return nil, userError{errors.New("read the ClusterRule: not a YAML object (key: value mapping)")}
	}
	u := &unstructured.Unstructured{Object: obj}
	want := v1beta1.GroupVersion.String()
	switch {
	case u.GetAPIVersion() != want || u.GetKind() != "ClusterRule":
		return nil, userError{fmt.Errorf("apiVersion %q, kind %q: want %s, ClusterRule", u.GetAPIVersion(), u.GetKind(), want)}
	case u.GetName() == "":
		return nil, userError{errors.New("metadata.name is required")}
	case u.GetNamespace() == "":
		return nil, userError{errors.New("metadata.namespace is required (the preview does not guess the namespace kubectl would use)")}
	}
	if err := rs.admit(ctx, obj); err != nil {
		return nil, userError{err}
	}
	// The schema let every field through: the typed decoding can only fail on a difference
	// between the Go type and the CRD, strictly, so that it is seen.
	js, err = json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var cr v1beta1.ClusterRule
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cr); err != nil {
		return nil, fmt.Errorf("decode the admitted ClusterRule: %w", err)
	}
	return &cr, nil
}

// splitDocuments returns the non-empty YAML documents of a manifest.
func splitDocuments(manifest []byte) [][]byte {
	var out [][]byte
	for _, d := range bytes.Split(append([]byte("\n"), manifest...), []byte("\n---")) {
		if len(bytes.TrimSpace(d)) > 0 {
			out = append(out, d)
		}
	}
	return out
}

// preview computes what applying the manifest would do. See the file comment.
func (p *previewer) preview(ctx context.Context, manifest []byte) (*events.PreviewResult, error) {
	cr, err := parseRule(ctx, p.schema, manifest)
	if err != nil {
		return nil, err
	}
	if err := p.checkWatched(cr.Namespace); err != nil {
		return nil, err
	}
	var live v1beta1.ClusterRule
	err = p.rules.Get(ctx, types.NamespacedName{Namespace: cr.Namespace, Name: cr.Name}, &live)
	switch {
	case apierrors.IsNotFound(err):
		return p.previewRule(ctx, cr, nil)
	case err != nil:
		return nil, fmt.Errorf("read ClusterRule %s/%s: %w", cr.Namespace, cr.Name, err)
	}
	return p.previewRule(ctx, cr, &live)
}

// checkWatched refuses a namespace outside WATCH_NAMESPACES: the engine never acts on its rules.
func (p *previewer) checkWatched(ns string) error {
	if len(p.watchNamespaces) > 0 && !slices.Contains(p.watchNamespaces, ns) {
		return userError{fmt.Errorf("namespace %s is not one this rule engine watches (WATCH_NAMESPACES %s)", ns, strings.Join(p.watchNamespaces, ","))}
	}
	return nil
}

// previewRule previews the candidate cr, an edit of live (nil: a new rule).
func (p *previewer) previewRule(ctx context.Context, cr, live *v1beta1.ClusterRule) (*events.PreviewResult, error) {
	res := &events.PreviewResult{}
	if live == nil {
		cr.UID, cr.Generation = "", 1
	} else {
		res.Existing, res.LiveGeneration = true, live.Generation
		cr.UID, cr.Generation = live.UID, live.Generation
		if !apiequality.Semantic.DeepEqual(cr.Spec, live.Spec) {
			cr.Generation++ // what the API server does on a spec change
		}
	}
	// Compiled as the controller compiles it: a rule outside OPERATOR_NAMESPACE acts under its
	// ClusterRuleGrant, which narrows what it selects and is part of its specs' hash.
	r, err := compileWithGrants(ctx, p.rules, cr, p.operatorNamespace)
	if err != nil {
		return nil, err
	}
	if r.invalid != nil {
		return nil, userError{fmt.Errorf("the rule is invalid, so applying it would change nothing (its status would say so): %w", r.invalid)}
	}
	var liveRule *ruleState
	if live != nil {
		if liveRule, err = compileWithGrants(ctx, p.rules, live, p.operatorNamespace); err != nil {
			return nil, err
		}
	}
	if err := p.previewCompiled(ctx, r, liveRule, res); err != nil {
		return nil, err
	}
	res.Clusters, res.Withheld = withholdUntargetable(r, res.Clusters)
	return res, nil
}

// scratchEngine returns an engine loaded from the state bucket through a read-only store and
// with no publisher, sharing the live engine's renderer and settings: what a preview or an
// explain decides on, without writing anything.
func (p *previewer) scratchEngine(ctx context.Context) (*engine, error) {
	e := newEngine(slog.New(slog.DiscardHandler), readOnlyStore{p.store}, noPublisher{}, p.renderer, newMetrics(nil), p.degradedTTL)
	e.maxRemovalFraction = p.maxRemovalFraction
	if err := e.load(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// previewCompiled fills res with what the valid compiled rule r, an edit of the compiled live
// rule (nil: a new rule), would do, on a scratch engine loaded from the state bucket.
func (p *previewer) previewCompiled(ctx context.Context, r, liveRule *ruleState, res *events.PreviewResult) error {
	e, err := p.scratchEngine(ctx)
	if err != nil {
		return err
	}
	st := e.previewRollout(r, liveRule)
	err = e.evaluate(ctx, func(rs *renders) error {
		prev := e.held[r.key]
		delete(e.held, r.key)
		ch := e.evalRule(r, rs)
		var later *change // a rollout's changes, made when it reaches each step
		if st != nil && st.rec.Phase != v1beta1.RolloutComplete {
			now := st.rec
			st.rec.Phase = v1beta1.RolloutComplete
			later = e.evalRule(r, rs)
			st.rec = now
		}
		if prev != nil {
			e.held[r.key] = prev
		}
		if len(rs.need) > 0 {
			return nil
		}
		unselected := map[int]bool{}
		for _, u := range ch.unselected {
			for i := u.from; i < u.to; i++ {
				unselected[i] = true
			}
		}
		intents := slices.Clone(ch.intents)
		h := e.breakRemovals(r, ch, prev)
		changes, err := e.previewChanges(ctx, r, liveRule, intents, func(i int) bool { return h != nil && unselected[i] })
		if err != nil {
			return err
		}
		res.Changes = changes
		if st != nil {
			defer e.previewRolloutClusters(r, st, res)
			if err := e.previewStaged(ctx, r, liveRule, st, later, res); err != nil {
				return err
			}
		}
		if h != nil {
			res.Held = &events.PreviewHeld{Generation: h.Generation, Installed: h.Installed, Cap: h.Cap,
				Clusters: slices.Sorted(maps.Values(h.Clusters)), Message: heldMessage(r, h)}
		}
		res.Unchanged = e.unchanged(r.key, changes)
		res.Clusters = e.previewClusters(r)
		for _, cid := range slices.Sorted(maps.Keys(r.templateErrors)) {
			te := r.templateErrors[cid]
			res.TemplateErrors = append(res.TemplateErrors, events.PreviewTemplateError{Cluster: te[0], Message: te[1]})
		}
		return nil
	})
	if err != nil {
		return err
	}
	res.Rule, res.Source = r.ref, r.sel.source
	return nil
}

// previewStaged sets a preview's rollout and, when the rollout is under way, splits its changes
// into those made now and those made later (later: the evaluation with the rollout complete).
func (e *engine) previewStaged(ctx context.Context, r, live *ruleState, st *rolloutState, later *change, res *events.PreviewResult) error {
	res.Rollout = e.rolloutView(r, st)
	if later == nil {
		return nil
	}
	laterChanges, err := e.previewChanges(ctx, r, live, later.intents, func(int) bool { return false })
	if err != nil {
		return err
	}
	res.Changes = stagedChanges(res.Changes, laterChanges, e.stepNames(r, st))
	return nil
}

// previewRolloutClusters marks each cluster of a preview with its rollout step and the
// generation it runs.
func (e *engine) previewRolloutClusters(r *ruleState, st *rolloutState, res *events.PreviewResult) {
	steps := e.stepNames(r, st)
	for i := range res.Clusters {
		res.Clusters[i].Step = steps[res.Clusters[i].Name]
		res.Clusters[i].Generation = e.generationOn(r.key, res.Clusters[i].Name)
	}
}

// previewChanges turns the intents of an evaluation into Application changes, with the spec
// each Application has (from the render cache, or the live rule's static render) and the one it
// would get. held(i) tells whether the breaker holds intent i.
func (e *engine) previewChanges(ctx context.Context, r, live *ruleState, intents []events.Event, held func(int) bool) ([]events.PreviewChange, error) {
	befores := &previousSpecs{e: e, rule: r.key, live: live, byRender: map[string]map[string]events.Enforcement{}}
	var out []events.PreviewChange
	for i, ev := range intents {
		var c events.PreviewChange
		var name string
		switch in := ev.(type) {
		case *events.InstallIntent:
			after := in.Enforcement
			name, c = in.Enforcement.Name, events.PreviewChange{Action: events.PreviewCreate, Cluster: in.Cluster.Name, After: &after}
		case *events.UninstallIntent:
			name, c = in.Enforcement, events.PreviewChange{Action: events.PreviewDelete, Cluster: in.Cluster.Name,
				Reason: in.Reason, DeletionPolicy: in.DeletionPolicy, Held: held(i)}
		default:
			continue
		}
		c.Enforcement, c.Application = name, events.ApplicationName(c.Cluster, name)
		prev, installed, err := befores.of(ctx, c.Cluster, name)
		if err != nil {
			return nil, err
		}
		if installed && c.Action == events.PreviewCreate {
			c.Action = events.PreviewUpdate
		}
		c.Before, c.BeforeUnknown = prev, installed && prev == nil
		c.Diff = specDiff(c.Before, c.After)
		out = append(out, c)
	}
	slices.SortStableFunc(out, func(a, b events.PreviewChange) int {
		return strings.Compare(a.Cluster+"\x00"+a.Enforcement, b.Cluster+"\x00"+b.Enforcement)
	})
	return out, nil
}

// previousSpecs finds the installed spec of a rule's enforcement on a cluster, reading each
// render once.
type previousSpecs struct {
	e        *engine
	rule     string
	live     *ruleState
	byRender map[string]map[string]events.Enforcement // render key -> enforcement name -> spec
}

// of returns the installed spec of enforcement name on cluster and whether it is installed at
// all; an installed enforcement whose render is no longer known has a nil spec.
func (p *previousSpecs) of(ctx context.Context, cluster, name string) (*events.Enforcement, bool, error) {
	for _, cid := range p.e.pairsNamed(p.rule, cluster) {
		pair := p.e.pairs[p.rule][cid]
		if pair.Enforcements.get(name) == nil {
			continue
		}
		enfs, err := p.render(ctx, pair.RenderKey)
		if err != nil {
			return nil, true, err
		}
		if en, ok := enfs[name]; ok {
			return &en, true, nil
		}
		return nil, true, nil // installed, but its spec is no longer known
	}
	return nil, false, nil
}

// render returns the enforcements of the render key, nil when the render is not known.
func (p *previousSpecs) render(ctx context.Context, key string) (map[string]events.Enforcement, error) {
	if enfs, ok := p.byRender[key]; ok {
		return enfs, nil
	}
	list, found, err := p.e.previousRender(ctx, key, p.live)
	if err != nil {
		return nil, err
	}
	var enfs map[string]events.Enforcement
	if found {
		enfs = make(map[string]events.Enforcement, len(list))
		for _, en := range list {
			enfs[en.Name] = en
		}
	}
	p.byRender[key] = enfs
	return enfs, nil
}

// previousRender returns the enforcements a pair was last rendered with: the render cache entry
// of its render key, or the live rule's render when the key is the live generation's static one
// (renders without templates are not cached). found is false when neither has it.
func (e *engine) previousRender(ctx context.Context, renderKey string, live *ruleState) ([]events.Enforcement, bool, error) {
	if live != nil && live.staticErr == nil && !live.compiled.templated && renderKey == live.staticKey {
		return live.static, true, nil
	}
	enfs, ok, err := e.store.getRender(ctx, renderKey)
	if err != nil {
		return nil, false, err
	}
	return enfs, ok, nil
}

// unchanged counts the enforcements the rule's pairs hold that no change touches (a held
// delete is counted as held, not here).
func (e *engine) unchanged(rule string, changes []events.PreviewChange) int {
	touched := map[string]bool{}
	for _, c := range changes {
		touched[c.Cluster+"\x00"+c.Enforcement] = true
	}
	n := 0
	for _, p := range e.pairs[rule] {
		if p.handedOverTo() != "" {
			continue
		}
		for _, st := range p.Enforcements {
			if !touched[p.Cluster.Value().Name+"\x00"+st.Name] {
				n++
			}
		}
	}
	return n
}

// previewClusters lists the clusters of the rule's source, by name, with whether the rule
// would give them its enforcements and, when not, why.
func (e *engine) previewClusters(r *ruleState) []events.PreviewCluster {
	var out []events.PreviewCluster
	for cid := range e.bySource[r.sel.source.ID] {
		c := &e.clusters[cid].Cluster
		pc := events.PreviewCluster{Name: c.Name}
		switch {
		case !r.sel.selects(c):
			pc.Reason = r.sel.whyNot(c)
		case !c.Eligible:
			pc.Reason = "not eligible: " + valueOrDash(c.State)
		default:
			pc.Matches = true
		}
		out = append(out, pc)
	}
	slices.SortFunc(out, func(a, b events.PreviewCluster) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func valueOrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// The reasons of whyNot that say a rule may not target a cluster at all: its grant does not
// allow it (explainRule does not name such clusters of a rule outside OPERATOR_NAMESPACE).
const (
	reasonNotPermitted = "no ClusterRuleGrant permits the rule (NotPermitted)"
	reasonOutsideGrant = "outside the cluster selector of the rule's ClusterRuleGrant"
)

// whyNot says why the selection does not select a cluster of its source: the first test of
// selects that fails. It is only called when selects said no, and falls back to a plain "not
// selected" should the two ever disagree.
func (s *selection) whyNot(c *events.Cluster) string {
	if s.denyAll {
		return reasonNotPermitted
	}
	if s.grant != nil && !s.grant.Matches(labels.Set(c.Labels)) {
		return reasonOutsideGrant
	}
	if s.ignore[c.Name] {
		return "ignored by name"
	}
	for _, k := range slices.Sorted(maps.Keys(s.labels)) {
		if got, ok := c.Labels[k]; !ok {
			return fmt.Sprintf("label %s missing (want %q)", k, s.labels[k])
		} else if got != s.labels[k] {
			return fmt.Sprintf("label %s is %q (want %q)", k, got, s.labels[k])
		}
	}
	if len(s.claims) > 0 && !hasClaims(c, s.claimsAttr, s.claims) {
		return "claims or properties do not match " + fmt.Sprint(s.claims)
	}
	if s.sourceSelector != nil && !s.sourceSelector.Matches(labels.Set(c.Labels)) {
		return "does not match the source's selector " + s.sourceSelector.String()
	}
	if s.selector != nil {
		return "does not match the label selector " + s.selector.String()
	}
	return "not selected"
}

// readOnlyStore is the live store for reads; it writes nothing. Records and holds are never
// written by a preview (it commits nothing), so their writes are errors; a render is simply not
// cached, a stopped render not remembered.
type readOnlyStore struct{ store }

var errPreviewWrite = errors.New("a preview writes nothing")

func (readOnlyStore) putCluster(context.Context, string, *clusterRecord) error {
	return errPreviewWrite
}
func (readOnlyStore) deleteCluster(context.Context, string) error { return errPreviewWrite }
func (readOnlyStore) putPair(context.Context, string, string, *pairState) error {
	return errPreviewWrite
}
func (readOnlyStore) deletePair(context.Context, string, string) error { return errPreviewWrite }
func (readOnlyStore) putDegraded(context.Context, string, *degradation) error {
	return errPreviewWrite
}
func (readOnlyStore) putHeld(context.Context, string, *heldRemovals) error { return errPreviewWrite }
func (readOnlyStore) putListed(context.Context, string, *listing) error    { return errPreviewWrite }
func (readOnlyStore) putRollout(context.Context, string, *rolloutRecord) error {
	return errPreviewWrite
}
func (readOnlyStore) putRender(_ context.Context, _ string, enfs []events.Enforcement) ([]events.Enforcement, error) {
	return enfs, nil
}
func (readOnlyStore) putFailure(context.Context, string, string) error  { return nil }
func (readOnlyStore) purgeRenders(context.Context, string, int64) error { return nil }

// noPublisher refuses to publish: a preview commits nothing.
type noPublisher struct{}

func (noPublisher) PublishAll(context.Context, []events.Event) error { return errPreviewWrite }
