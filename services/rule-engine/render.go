package main

// Templates. The original operator rendered each enforcement as YAML text through Jinja with the
// delimiters ${{ }} and ${% %} and loaded the result back; here every string field of an
// enforcement is its own template, rendered with gonja (real Jinja semantics) and trimmed, which
// gives the same values without a YAML round trip. Literal fields (no "${") skip the engine.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service/egress"
	"github.com/nikolalohinski/gonja/v2"
	jinjaconfig "github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
)

func init() {
	// gonja logs through the global logrus logger; our logs are slog JSON only.
	gonja.SetLoggerOutput(io.Discard)
}

// templateConfig is the original operator's Jinja syntax: ${{ expr }}, ${% stmt %}, ${# #}.
var templateConfig = func() *jinjaconfig.Config {
	c := jinjaconfig.New()
	c.VariableStartString = "${{"
	c.BlockStartString = "${%"
	c.CommentStartString = "${#"
	return c
}()

// templateMarker is what makes a field a template; anything else is a literal.
const templateMarker = "${"

// Renderer compiles and renders enforcement templates. The zero value is not usable; see
// newRenderer.
type Renderer struct {
	http *templateHTTP // nil: requests.get fails with a clear error
	// limit bounds one render (see renderSafely); 0 means no bound.
	limit time.Duration
}

// newRenderer returns a renderer whose templates may fetch JSON from allowedHosts (host names,
// compared without case; empty: no network at all) within timeout.
func newRenderer(allowedHosts []string, timeout time.Duration) *Renderer {
	r := &Renderer{}
	if len(allowedHosts) > 0 {
		t := &templateHTTP{allowed: map[string]bool{}}
		for _, h := range allowedHosts {
			t.allowed[strings.ToLower(strings.TrimSpace(h))] = true
		}
		// The default egress policy until useEgress sets the operator's: no proxy, and every
		// dial, redirects included, refused inside the network (loopback, private, metadata).
		t.client = &http.Client{Timeout: timeout, Transport: egress.Policy{}.Transport(), CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("too many redirects")
			}
			if !t.allowed[strings.ToLower(req.URL.Hostname())] {
				return fmt.Errorf("redirect to host %q, which is not in TEMPLATE_HTTP_ALLOW", req.URL.Hostname())
			}
			return nil
		}}
		r.http = t
	}
	return r
}

// field is one string of an enforcement: a literal, a compiled template, or a template that did
// not parse (err).
type field struct {
	raw string
	tpl *exec.Template
	err error
}

// compileField parses one field. what names it in errors ("enforcements[0].name"), so a rule
// author reads where the template is. Parsing happens once per rule generation, not per cluster.
func compileField(what, raw string) field {
	if !strings.Contains(raw, templateMarker) {
		return field{raw: raw}
	}
	loader, err := loaders.NewMemoryLoader(map[string]string{"/" + what: raw})
	if err == nil {
		// The memory loader holds only this template, so include/import cannot read files.
		var tpl *exec.Template
		tpl, err = exec.NewTemplate("/"+what, templateConfig, loader, guardedEnvironment)
		if err == nil {
			return field{raw: raw, tpl: tpl}
		}
	}
	return field{raw: raw, err: fmt.Errorf("%s: parse template: %w", what, err)}
}

// render evaluates the field with data (nil for literal-only rules), writing through the
// render's guard.
func (f field) render(what string, data *exec.Context, g *guard) (string, error) {
	if f.err != nil {
		return "", f.err
	}
	if f.tpl == nil {
		return f.raw, nil
	}
	var out strings.Builder
	if err := f.tpl.Execute(g.writer(&out), data); err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	// The original's YAML round trip dropped the spaces around a rendered scalar.
	return strings.TrimSpace(out.String()), nil
}

// fieldPair is one map entry whose key and value are both templates (helm parameters, labels):
// the original rendered the whole YAML text, keys included.
type fieldPair struct{ key, value field }

// compiledEnforcement is one enforcement with every string field compiled.
type compiledEnforcement struct {
	index                                       int
	name, repo, path, namespace, targetRevision field
	params, labels                              []fieldPair
}

// compiledRule is a rule's enforcements, compiled once per generation.
type compiledRule struct {
	enforcements []compiledEnforcement
	// templated is false when no field is a template: every cluster gets the same render.
	templated bool
}

// compile compiles a rule's enforcements. Template syntax errors are kept in the fields and
// reported for every cluster at render time, as TemplateError.
func compile(enfs []v1beta1.Enforcement) *compiledRule {
	cr := &compiledRule{}
	for i, e := range enfs {
		at := func(f string) string { return fmt.Sprintf("enforcements[%d].%s", i, f) }
		ce := compiledEnforcement{
			index:          i,
			name:           compileField(at("name"), e.Name),
			repo:           compileField(at("repo"), e.Repo),
			path:           compileField(at("path"), e.Path),
			namespace:      compileField(at("namespace"), e.Namespace),
			targetRevision: compileField(at("targetRevision"), e.TargetRevision),
		}
		if e.Helm != nil {
			for _, k := range slices.Sorted(maps.Keys(e.Helm.Parameters)) {
				p := at("helm.parameters." + k)
				ce.params = append(ce.params, fieldPair{compileField(p+"(name)", k), compileField(p, jsonString(e.Helm.Parameters[k].Raw))})
			}
		}
		for _, k := range slices.Sorted(maps.Keys(e.Labels)) {
			p := at("labels." + k)
			ce.labels = append(ce.labels, fieldPair{compileField(p+"(key)", k), compileField(p, e.Labels[k])})
		}
		for _, f := range ce.fields() {
			if f.tpl != nil || f.err != nil {
				cr.templated = true
			}
		}
		cr.enforcements = append(cr.enforcements, ce)
	}
	return cr
}

func (ce *compiledEnforcement) fields() []field {
	fs := []field{ce.name, ce.repo, ce.path, ce.namespace, ce.targetRevision}
	for _, p := range ce.params {
		fs = append(fs, p.key, p.value)
	}
	for _, p := range ce.labels {
		fs = append(fs, p.key, p.value)
	}
	return fs
}

// jsonString is the string form of a Helm parameter value: a JSON string unquoted, anything
// else (numbers, booleans) as written, so replicaCount: 1 becomes "1".
func jsonString(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	}
	if string(raw) == "null" {
		return ""
	}
	return string(raw)
}

// templateVars are the variables a template sees for one cluster: the source's own fields, then
// name, url and id (the cluster key), which win over attributes of the same name. Never
// credentials: sources do not put them in events.
func templateVars(c *events.Cluster) map[string]any {
	vars := make(map[string]any, len(c.Attributes)+3)
	for k, v := range c.Attributes {
		vars[k] = v
	}
	vars["name"] = c.Name
	vars["url"] = c.URL
	vars["id"] = c.Key
	return vars
}

// varsHash is the cache identity of a cluster's template variables.
func varsHash(vars map[string]any) string {
	b, _ := json.Marshal(vars) // maps marshal with sorted keys: deterministic
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// render renders every enforcement of the rule for one cluster, within ctx: every step of the
// template checks it (see guard), so the render stops soon after ctx ends, and requests.get
// calls take it. The first failing field fails the whole (rule, cluster) pair, so a
// half-rendered rule never reaches a cluster.
func (r *Renderer) render(ctx context.Context, cr *compiledRule, vars map[string]any) ([]events.Enforcement, error) {
	g := &guard{ctx: ctx}
	// One context per render: gonja copies it into each field's evaluation, and requests is
	// added here rather than in vars so that it never takes part in the cache key.
	var data *exec.Context
	if cr.templated {
		d := make(map[string]any, len(vars)+2)
		for k, v := range vars {
			d[k] = v
		}
		d["requests"] = map[string]any{"get": func(rawURL string) (map[string]any, error) { return r.http.get(ctx, rawURL) }}
		d[guardVar] = g
		data = exec.NewContext(d)
	}
	out := make([]events.Enforcement, 0, len(cr.enforcements))
	seen := make(map[string]int, len(cr.enforcements))
	for i := range cr.enforcements {
		ce := &cr.enforcements[i]
		var e events.Enforcement
		var errs []error
		str := func(f field, what string) string {
			if g.err != nil {
				return "" // a limit ended the render
			}
			s, err := f.render(what, data, g)
			if err != nil {
				errs = append(errs, urlsRedacted{err})
			}
			return s
		}
		e.Name = str(ce.name, "name")
		e.Repo = str(ce.repo, "repo")
		e.Path = str(ce.path, "path")
		e.Namespace = str(ce.namespace, "namespace")
		e.TargetRevision = str(ce.targetRevision, "targetRevision")
		for _, p := range ce.params {
			e.HelmParameters = append(e.HelmParameters, events.HelmParameter{Name: str(p.key, "helm parameter"), Value: str(p.value, "helm parameter")})
		}
		if len(ce.labels) > 0 {
			e.Labels = make(map[string]string, len(ce.labels))
			for _, p := range ce.labels {
				e.Labels[str(p.key, "label")] = str(p.value, "label")
			}
		}
		// A limit (or the caller's cancellation) is the reason, whatever gonja made of it.
		if g.check() != nil {
			return nil, fmt.Errorf("enforcements[%d]: %w", ce.index, g.err)
		}
		// Every failing field is reported, not only the first, so one status read shows all.
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("enforcements[%d]: %w", ce.index, err)
		}
		if e.Namespace == "" {
			e.Namespace = "default"
		}
		switch {
		case e.Name == "":
			return nil, fmt.Errorf("enforcements[%d]: name renders empty", ce.index)
		case e.Repo == "":
			return nil, fmt.Errorf("enforcements[%d]: repo renders empty", ce.index)
		}
		// Two enforcements with one rendered name would fight over one Application.
		if j, dup := seen[e.Name]; dup {
			return nil, fmt.Errorf("enforcements[%d] and [%d] both render the name %q", j, ce.index, e.Name)
		}
		seen[e.Name] = ce.index
		out = append(out, e)
	}
	return out, nil
}

// renderSafely is render with the guards a rule author cannot bypass: the render runs within
// TEMPLATE_RENDER_TIMEOUT (r.limit; past it errRenderTimeout), its output within
// maxRenderOutput, and a panic inside the template engine becomes a template error instead of
// a crash. It renders in the caller's goroutine and returns only when the render has stopped:
// nothing of it keeps running. When ctx itself ends first, its error is returned (not a
// template error: the caller stops or retries).
func (r *Renderer) renderSafely(ctx context.Context, cr *compiledRule, vars map[string]any) (enfs []events.Enforcement, err error) {
	if r.limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, r.limit, errRenderTimeout)
		defer cancel()
	}
	defer func() {
		if p := recover(); p != nil {
			enfs, err = nil, fmt.Errorf("template engine failed: %v", p)
		}
	}()
	return r.render(ctx, cr, vars)
}

// specHash identifies a rendered enforcement on a cluster URL: a changed render, or a cluster
// that moved to a new API URL, gives a new install intent.
func specHash(e *events.Enforcement, clusterURL string) string {
	b, _ := json.Marshal(e)
	h := sha256.New()
	h.Write(b)
	h.Write([]byte{0})
	h.Write([]byte(clusterURL))
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// templateHTTP is the original's requests.get(url).json(), limited to allowed hosts.
type templateHTTP struct {
	allowed map[string]bool
	client  *http.Client
}

// useEgress makes requests.get connect only where policy allows, checked on the resolved
// address of every dial, redirects included (see package egress). The host allow-list
// (TEMPLATE_HTTP_ALLOW) still applies first.
func (r *Renderer) useEgress(policy egress.Policy) {
	if r.http != nil {
		r.http.client.Transport = policy.Transport()
	}
}

// maxTemplateResponse bounds what a template may read from the network.
const maxTemplateResponse = 1 << 20

// get fetches rawURL within ctx, the render's. It is what templates call as
// requests.get(url); the result has json(), text and status_code like a Python requests
// response.
func (t *templateHTTP) get(ctx context.Context, rawURL string) (map[string]any, error) {
	if t == nil {
		return nil, errors.New("requests.get is disabled: set TEMPLATE_HTTP_ALLOW to the hosts templates may call")
	}
	// The allow-list is checked on the URL's host name only (any port, either scheme), and again
	// on every redirect (CheckRedirect), so an allowed host cannot send a template elsewhere.
	shown := events.RedactURL(rawURL) // errors reach the rule's status: never a token of the URL
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("requests.get(%s): not an http(s) URL", shown)
	}
	if !t.allowed[strings.ToLower(u.Hostname())] {
		return nil, fmt.Errorf("requests.get(%s): host %q is not in TEMPLATE_HTTP_ALLOW", shown, u.Hostname())
	}
	ctx, cancel := context.WithTimeout(ctx, t.client.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, fmt.Errorf("requests.get(%s): %w", shown, withoutURL(err))
	}
	resp, err := t.client.Do(req)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			err = cause // the render's limit (or its caller's end) cut the call
		}
		return nil, fmt.Errorf("requests.get(%s): %w", shown, withoutURL(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxTemplateResponse))
	if err != nil {
		return nil, fmt.Errorf("requests.get(%s): read body: %w", shown, err)
	}
	return map[string]any{
		"status_code": resp.StatusCode,
		"text":        string(body),
		"json": func() (any, error) {
			var v any
			if err := json.Unmarshal(body, &v); err != nil {
				return nil, fmt.Errorf("requests.get(%s).json(): %w", shown, err)
			}
			return v, nil
		},
	}, nil
}

// urlsRedacted is a render error whose message shows every URL redacted (events.RedactURLsIn):
// the template engine repeats the expression it failed on, and a URL written in it
// (requests.get('https://…?token=…')) must not reach the rule's status, the render cache or logs.
type urlsRedacted struct{ err error }

func (e urlsRedacted) Error() string { return events.RedactURLsIn(e.err.Error()) }
func (e urlsRedacted) Unwrap() error { return e.err }

// withoutURL drops the URL a *url.Error names (net/http hides only its password, not a token in
// its query): the caller shows the redacted URL itself.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
