// Package rancher lists the clusters of a Rancher server through its v3 API (GET /v3/clusters),
// the source the original Enforcement operator supported.
//
// The listing must be complete or fail: every page is followed through pagination.next, and a
// failed page, a body that is not a Rancher collection, or a "partial" collection without a next
// page makes the whole listing an error, so that the scanner never mistakes a short listing for
// removed clusters. The bearer token is sent only to the host of the Secret's url: pagination
// links and redirects that point elsewhere are refused.
package rancher

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
)

// maxPageBytes bounds one page's body; a larger answer is treated as garbage, not read forever.
const maxPageBytes = 64 << 20

// maxPages bounds how many pages one listing follows, against a pagination loop.
const maxPages = 10000

// VolatileFields are top-level fields of a Rancher cluster object that change all the time
// (resource usage, condition timestamps, transition messages). They are left out of the
// attributes, so that a change in them does not announce a cluster update every scan and make
// every rule re-render; templates cannot use them.
var VolatileFields = []string{
	"allocatable", "capacity", "limits", "requested", "conditions", "componentStatuses",
	"transitioning", "transitioningMessage",
}

// AttributeFields are the top-level fields of a Rancher cluster object that become attributes
// (template variables), besides the ones an operator adds (Lister.ExtraFields): descriptive
// fields that carry no credential. Everything else (the provider configurations such as
// rancherKubernetesEngineConfig, importedConfig with its kubeConfig, appliedSpec, caCert,
// actions, links, and any field a newer Rancher adds) is left out, so that a credential in a
// field nobody thought of never reaches an event or a template. The original operator's
// documented variables (name, url, id) are among them or set by rule-engine.
var AttributeFields = []string{
	"id", "name", "state", "labels", "annotations", "description", "driver", "provider", "version",
	"nodeCount", "nodeVersion", "created", "createdTS", "creatorId", "uuid", "internal", "type",
	"baseType", "dockerRootDir", "enableNetworkPolicy", "enableClusterAlerting",
	"enableClusterMonitoring", "istioEnabled", "windowsPreferedCluster", "fleetWorkspaceName",
	"clusterTemplateId", "clusterTemplateRevisionId", "defaultPodSecurityPolicyTemplateId",
	"defaultClusterRoleForProjectMembers",
}

// Lister lists one Rancher source: the server of Creds, narrowed by Filters (query parameters
// of /v3/clusters, as the original's rule filters).
type Lister struct {
	// Creds are the source Secret's, parsed by events.ParseRancherSecret.
	Creds   events.RancherCredentials
	Filters map[string]string
	// IgnoreFields are further top-level fields left out of the attributes (RANCHER_IGNORE_FIELDS),
	// for installations whose cluster objects carry other fields that change on every scan.
	IgnoreFields []string
	// ExtraFields are top-level fields added to AttributeFields (RANCHER_EXTRA_FIELDS), for
	// templates that use a field outside the list; the credentials in them are still dropped at
	// any depth (Sensitive).
	ExtraFields []string
}

// List fetches every page of /v3/clusters. Errors are scanner.DegradedErrors: Unauthorized for
// 401/403, PartialListing when a page after the first fails, ListFailed otherwise.
func (l *Lister) List(ctx context.Context) ([]events.Cluster, error) {
	return scanner.ListAll(ctx, l.ListPages)
}

// ListPages fetches the pages of /v3/clusters one after the other and hands each page's clusters
// to each before fetching the next (scanner.PagedLister), so that a large Rancher is diffed a
// page at a time. Its errors are List's, and each's error as it is.
func (l *Lister) ListPages(ctx context.Context, each func([]events.Cluster) error) error {
	client := l.httpClient()
	defer client.CloseIdleConnections()

	first := *l.Creds.URL
	first.Path += "/v3/clusters"
	q := url.Values{}
	for k, v := range l.Filters {
		q.Set(k, v)
	}
	first.RawQuery = q.Encode()

	next := first.String()
	seen := map[string]bool{}
	for page := 1; next != ""; page++ {
		fail := func(reason string, err error) error {
			if page > 1 && reason == events.DegradedListFailed {
				reason = events.DegradedPartial
				err = fmt.Errorf("page %d: %w", page, err)
			}
			return scanner.Degraded(reason, err)
		}
		if page > maxPages || seen[next] {
			return fail(events.DegradedListFailed, errors.New("pagination does not end"))
		}
		seen[next] = true
		target, err := url.Parse(next)
		if err != nil {
			return fail(events.DegradedListFailed, fmt.Errorf("pagination.next %q: %w", next, err))
		}
		if !sameOrigin(target, l.Creds.URL) {
			return fail(events.DegradedListFailed,
				fmt.Errorf("pagination.next points to %s, not the source host %s; not sending the token there", target.Host, l.Creds.URL.Host))
		}
		c, nextURL, reason, err := l.page(ctx, client, target)
		if err != nil {
			return fail(reason, err)
		}
		if err := each(c); err != nil {
			return err
		}
		next = nextURL
	}
	return nil
}

var _ scanner.PagedLister = (*Lister)(nil)

// collection is the envelope of a Rancher v3 list answer.
type collection struct {
	Type       string            `json:"type"`
	Data       []json.RawMessage `json:"data"`
	Pagination *struct {
		Next    string `json:"next"`
		Partial bool   `json:"partial"`
	} `json:"pagination"`
}

// page fetches one page and returns its clusters and the next page's URL.
func (l *Lister) page(ctx context.Context, client *http.Client, target *url.URL) ([]events.Cluster, string, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return nil, "", events.DegradedListFailed, err
	}
	req.Header.Set("Authorization", "Bearer "+l.Creds.Token)
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", events.DegradedListFailed, fmt.Errorf("GET %s: %w", redact(target), err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, "", events.DegradedUnauthorized, fmt.Errorf("GET %s: %s: the server refused the token", redact(target), resp.Status)
	case resp.StatusCode != http.StatusOK:
		return nil, "", events.DegradedListFailed, fmt.Errorf("GET %s: %s", redact(target), resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPageBytes+1))
	if err != nil {
		return nil, "", events.DegradedListFailed, fmt.Errorf("GET %s: read body: %w", redact(target), err)
	}
	if len(body) > maxPageBytes {
		return nil, "", events.DegradedListFailed, fmt.Errorf("GET %s: body larger than %d bytes", redact(target), maxPageBytes)
	}
	if err := ctx.Err(); err != nil {
		// The listing's time ran out while the page came: a body cut short by it is not the
		// server's fault, and the error says what happened.
		return nil, "", events.DegradedListFailed, fmt.Errorf("GET %s: %w", redact(target), err)
	}
	return l.parsePage(target, body)
}

// parsePage reads one page of the cluster collection fetched from target: its clusters, the
// next page's URL ("" for the last), and on failure the degraded reason.
func (l *Lister) parsePage(target *url.URL, body []byte) ([]events.Cluster, string, string, error) {
	var col collection
	if err := json.Unmarshal(body, &col); err != nil {
		return nil, "", events.DegradedListFailed, fmt.Errorf("GET %s: not a Rancher collection: %w", redact(target), err)
	}
	if col.Type != "collection" || col.Data == nil {
		return nil, "", events.DegradedListFailed, fmt.Errorf("GET %s: not a Rancher collection (type %q, data missing: %t)", redact(target), col.Type, col.Data == nil)
	}
	clusters := make([]events.Cluster, 0, len(col.Data))
	for i, raw := range col.Data {
		c, err := l.cluster(raw)
		if err != nil {
			return nil, "", events.DegradedListFailed, fmt.Errorf("GET %s: cluster #%d: %w", redact(target), i, err)
		}
		clusters = append(clusters, c)
	}
	next := ""
	if col.Pagination != nil {
		next = col.Pagination.Next
		if col.Pagination.Partial && next == "" {
			return nil, "", events.DegradedPartial, fmt.Errorf("GET %s: the answer is partial and has no next page", redact(target))
		}
	}
	if next != "" {
		// Rancher sends absolute links; resolve relative ones against the page they came from.
		ref, err := target.Parse(next)
		if err != nil {
			return nil, "", events.DegradedListFailed, fmt.Errorf("GET %s: pagination.next %q: %w", redact(target), next, err)
		}
		next = ref.String()
	}
	return clusters, next, "", nil
}

// cluster converts one cluster object. Its top-level fields named in AttributeFields or
// ExtraFields, minus VolatileFields and IgnoreFields, become the attributes (template
// variables), with credentials dropped at any depth; id, name, state and labels are read from
// the object.
func (l *Lister) cluster(raw json.RawMessage) (events.Cluster, error) {
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return events.Cluster{}, fmt.Errorf("not a JSON object: %w", err)
	}
	id, _ := obj["id"].(string)
	name, _ := obj["name"].(string)
	if id == "" || name == "" {
		return events.Cluster{}, errors.New("id or name is missing")
	}
	state, _ := obj["state"].(string)
	labels := map[string]string{}
	if m, ok := obj["labels"].(map[string]any); ok {
		for k, v := range m {
			if s, ok := v.(string); ok {
				labels[k] = s
			} else {
				labels[k] = fmt.Sprint(v)
			}
		}
	}
	attrs := make(map[string]any, len(AttributeFields)+len(l.ExtraFields))
	for _, fields := range [][]string{AttributeFields, l.ExtraFields} {
		for _, k := range fields {
			v, ok := obj[k]
			switch {
			case !ok:
			case k == "labels" || k == "annotations" || k == "id" || k == "name":
				attrs[k] = v
			case !Sensitive(k):
				attrs[k] = scrub(v)
			}
		}
	}
	for _, f := range VolatileFields {
		delete(attrs, f)
	}
	for _, f := range l.IgnoreFields {
		delete(attrs, f)
	}
	return events.Cluster{
		Key:        id,
		Name:       name,
		URL:        l.Creds.URL.String() + "/k8s/clusters/" + url.PathEscape(id),
		Labels:     labels,
		State:      state,
		Eligible:   Eligible(state),
		Attributes: attrs,
	}, nil
}

// scrub removes, at any depth, the object keys that name credentials (see Sensitive), so that no
// secret a Rancher object may carry (RKE private registry passwords, cloud provider client
// secrets, ...) reaches an event or a template variable. It changes maps in place.
func scrub(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if Sensitive(k) {
				delete(v, k)
				continue
			}
			v[k] = scrub(x)
		}
	case []any:
		for i := range v {
			v[i] = scrub(v[i])
		}
	}
	return v
}

// sensitiveWords are the fragments of a field name that mark a credential.
var sensitiveWords = [][]byte{[]byte("password"), []byte("passwd"), []byte("secret"), []byte("token"),
	[]byte("privatekey"), []byte("clientkey"), []byte("sshkey"), []byte("apikey"), []byte("credential"),
	[]byte("kubeconfig")}

// sensitiveNames are field names that are a credential as a whole ("key": a TLS or SSH key),
// compared like sensitiveWords but in full, since "keyPath" or "monkey" are not.
var sensitiveNames = [][]byte{[]byte("key"), []byte("cert")}

// Sensitive reports whether a field name names a credential ("password", "aadClientSecret",
// "private_key", "bearerToken", "kubeConfig", "key", ...): compared without case, "-" and "_". Such fields are dropped
// from attributes at any depth (labels and annotations excepted, whose keys are names, not values).
// It runs for every field of every listed cluster, so it normalises into a stack buffer instead
// of allocating.
func Sensitive(field string) bool {
	var buf [64]byte
	norm := buf[:0]
	for i := 0; i < len(field); i++ {
		c := field[i]
		switch {
		case c == '-' || c == '_':
			continue
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		norm = append(norm, c)
	}
	for _, w := range sensitiveWords {
		if bytes.Contains(norm, w) {
			return true
		}
	}
	for _, w := range sensitiveNames {
		if bytes.Equal(norm, w) {
			return true
		}
	}
	return false
}

// Eligible is the original operator's rule: a Rancher cluster may receive new installs in any
// state but provisioning and waiting.
func Eligible(state string) bool {
	return state != "provisioning" && state != "waiting"
}

// httpClient builds a client that verifies TLS (against caCert when given, else the system
// roots) unless the Secret says insecure, and that follows redirects only within the source's
// own origin, so the token is never sent to another host.
func (l *Lister) httpClient() *http.Client {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(l.Creds.CACert) > 0 {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(l.Creds.CACert)
		tlsConfig.RootCAs = pool
	}
	if l.Creds.Insecure {
		tlsConfig.InsecureSkipVerify = true //nolint:gosec // the operator asked for it in the Secret
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = tlsConfig
	origin := l.Creds.URL
	return &http.Client{
		Transport: transport,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if !sameOrigin(req.URL, origin) {
				return fmt.Errorf("redirect to %s refused: not the source host", req.URL.Host)
			}
			if len(via) >= 5 {
				return errors.New("too many redirects")
			}
			return nil
		},
	}
}

// sameOrigin reports whether u has the scheme and host of origin (an https source never
// downgrades to http).
func sameOrigin(u, origin *url.URL) bool {
	return strings.EqualFold(u.Scheme, origin.Scheme) && strings.EqualFold(u.Host, origin.Host)
}

// redact drops the query string from a URL for messages (filters are harmless, but a server's
// pagination token or marker need not end up in events).
func redact(u *url.URL) string {
	c := *u
	c.RawQuery = ""
	c.User = nil
	return c.String()
}
