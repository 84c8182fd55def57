// Package gke lists the Google Kubernetes Engine clusters of one or more projects through the
// real google.golang.org/api/container/v1 client: one projects/<p>/locations/- list per project
// and scan (the API answers every location at once and has no paging).
//
// The listing must be complete or fail. A failed project, or an answer whose missingZones is
// not empty (GKE could not reach some zones, so clusters there may be missing), makes the whole
// List an error (a scanner.DegradedError), so that the scanner never mistakes a short listing
// for removed clusters. 429 and 5xx answers are retried a few times with backoff first.
//
// Filters narrow the listing the way `gcloud container clusters list --filter` does for the
// simple cases: each filter names a field of the cluster object in gcloud's dotted form and a
// glob pattern (path.Match); a cluster is listed when every filter matches. The supported keys
// are listed in SupportedFilters; any other key is rejected with a message naming it (reason
// InvalidSpec), rather than silently matching nothing or everything.
//
// Filter (spec.source.gke.filter) takes gcloud's whole filter language over the whole cluster
// object (pkg/api/gcloudfilter); it applies together with the map. An invalid expression is an
// InvalidSpec error, never a silent non-match.
//
// Secrets never appear in errors or logs: the service-account key stays inside the auth
// library, and error messages carry the API's status and message only.
package gke

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	container "google.golang.org/api/container/v1"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"

	"github.com/enforcement-io/enforcement/pkg/api/gcloudfilter"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
)

// Attribute keys for Argo CD registration through its exec provider (argocd-k8s-auth gcp, which
// takes its token from the application default credentials of Argo CD's own pods). argo-syncer
// builds the cluster Secret's config from them: {"execProviderConfig": {"command": <command>,
// "args": <args>, "apiVersion": <apiVersion>}, "tlsClientConfig": {"caData": <AttrArgoCDCAData>}}.
const (
	// AttrArgoCDCAData is masterAuth.clusterCaCertificate: the base64 of the cluster CA's PEM,
	// the form of Argo CD's tlsClientConfig.caData in the Secret's JSON config.
	AttrArgoCDCAData = "argocd.caData"
	// AttrArgoCDExecCommand is "argocd-k8s-auth".
	AttrArgoCDExecCommand = "argocd.execProviderConfig.command"
	// AttrArgoCDExecArgs is ["gcp"].
	AttrArgoCDExecArgs = "argocd.execProviderConfig.args"
	// AttrArgoCDExecAPIVersion is "client.authentication.k8s.io/v1beta1".
	AttrArgoCDExecAPIVersion = "argocd.execProviderConfig.apiVersion"
)

// Statuses of a GKE cluster.
const (
	StatusRunning     = "RUNNING"
	StatusReconciling = "RECONCILING"
)

// Eligible reports whether a cluster in this status may receive new installs: RUNNING or
// RECONCILING. PROVISIONING waits; DEGRADED, ERROR and STOPPING keep what they have.
func Eligible(status string) bool { return status == StatusRunning || status == StatusReconciling }

// VolatileFields are top-level fields of the cluster object left out of the attributes: they
// change without the cluster changing in a way a template cares about (node counts under
// autoscaling, conditions, transition messages, etags, node pools' own state), and each change
// would announce a cluster update and re-render every rule. masterAuth is left out because it
// may hold legacy basic-auth and client-certificate secrets; its CA is kept under
// AttrArgoCDCAData.
var VolatileFields = []string{
	"currentNodeCount", "conditions", "statusMessage", "etag", "nodePools", "instanceGroupUrls", "masterAuth",
}

// SupportedFilters are the filter keys List accepts, besides "resourceLabels.<key>" (a label
// value; a cluster without the label does not match). Each names a field of the cluster object
// as the API (and gcloud) spells it; "project" is the project the cluster was listed from.
// Values are compared as text: booleans are "true"/"false", numbers in decimal. A cluster
// without the field does not match, whatever the pattern.
var SupportedFilters = []string{
	"name", "description", "location", "zone", "project", "status", "id", "selfLink", "endpoint",
	"currentMasterVersion", "currentNodeVersion", "initialClusterVersion",
	"network", "subnetwork", "clusterIpv4Cidr", "servicesIpv4Cidr", "loggingService", "monitoringService",
	"createTime", "releaseChannel.channel", "autopilot.enabled",
	"privateClusterConfig.enablePrivateNodes", "privateClusterConfig.enablePrivateEndpoint",
}

// labelPrefix starts the one open-ended filter key family.
const labelPrefix = "resourceLabels."

// ValidateFilters checks filter keys and patterns: every key is in SupportedFilters or is
// "resourceLabels.<key>", and every pattern is a valid path.Match pattern. The error names the
// first offending key (in key order).
func ValidateFilters(filters map[string]string) error {
	keys := make([]string, 0, len(filters))
	for k := range filters {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch {
		case strings.HasPrefix(k, labelPrefix) && len(k) > len(labelPrefix):
		case slices.Contains(SupportedFilters, k):
		default:
			return fmt.Errorf("gke.filters: unsupported key %q (supported: %s, resourceLabels.<key>)", k, strings.Join(SupportedFilters, ", "))
		}
		if _, err := path.Match(filters[k], ""); err != nil {
			return fmt.Errorf("gke.filters: key %q: pattern %q is not a valid glob: %w", k, filters[k], err)
		}
	}
	return nil
}

// Matches reports whether a cluster object (as the API returns it, decoded into a map) listed
// from project matches every filter. The filters must have passed ValidateFilters.
func Matches(obj map[string]any, project string, filters map[string]string) bool {
	for k, pattern := range filters {
		v, ok := field(obj, project, k)
		if !ok {
			return false
		}
		if m, _ := path.Match(pattern, v); !m {
			return false
		}
	}
	return true
}

// field reads a dotted field as text.
func field(obj map[string]any, project, key string) (string, bool) {
	if key == "project" {
		return project, true
	}
	var cur any = obj
	parts := strings.Split(key, ".")
	if strings.HasPrefix(key, labelPrefix) {
		parts = []string{"resourceLabels", strings.TrimPrefix(key, labelPrefix)}
	}
	for _, p := range parts {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false
		}
		if cur, ok = m[p]; !ok || cur == nil {
			return "", false
		}
	}
	switch v := cur.(type) {
	case string:
		return v, true
	case bool:
		return strconv.FormatBool(v), true
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), true
	default:
		return "", false
	}
}

// Credentials are what a GKE source Secret holds (events.ParseGKESecret reads them, naming the
// Secret key in its errors): a service-account key. The zero value means application default
// credentials (Workload Identity on GKE).
type Credentials = events.GKECredentials

// Options configure a Lister. Projects (or a key with a project_id) is needed; the zero value
// of every other field is its default.
type Options struct {
	// Projects to list (spec.source.gke.projects): project ids or numbers. Empty: the
	// service-account key's project_id, and an InvalidSpec error without one.
	Projects []string
	// Filters (spec.source.gke.filters); see SupportedFilters.
	Filters map[string]string
	// Filter (spec.source.gke.filter) is a gcloud filter expression; both it and Filters must
	// match.
	Filter string
	// Credentials returns the source Secret's credentials at each scan (so a fixed Secret takes
	// effect without a restart). Its error is returned as is (wrap it in a DegradedError with
	// reason SecretInvalid). Nil or zero Credentials: application default credentials.
	Credentials func(ctx context.Context) (Credentials, error)
	// Endpoint overrides the container API endpoint (tests, Private Service Connect).
	Endpoint string
	// MaxAttempts bounds the attempts of one project's list on 429 and 5xx answers (default 4);
	// Backoff is the first wait between attempts, doubled each time up to 8 times itself, with
	// jitter (default 500ms).
	MaxAttempts int
	Backoff     time.Duration
	// Calls counts every attempt by operation ("ListClusters") and outcome (success, throttled,
	// error); see NewCallsCounter. Nil: not counted.
	Calls *prometheus.CounterVec
}

func (o Options) withDefaults() Options {
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 4
	}
	if o.Backoff <= 0 {
		o.Backoff = 500 * time.Millisecond
	}
	return o
}

// NewCallsCounter registers and returns the API call counter for Options.Calls:
// enforcement_source_scanner_gke_api_calls_total{operation, outcome}.
func NewCallsCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	return scanner.NewAPICallsCounter(reg, "enforcement_source_scanner_gke_api_calls_total",
		"Google container API calls (attempts, retries included) made to list GKE clusters, by operation and outcome (success, throttled, error).")
}

// Lister lists the GKE clusters of one source. Keep one per source: it keeps the API client
// (and so its OAuth token) between scans while the credentials do not change. It is safe for
// concurrent use (concurrent Lists are serialised).
type Lister struct {
	opts Options

	mu          sync.Mutex
	fingerprint string
	svc         *container.Service
}

// NewLister returns a Lister with opts.
func NewLister(opts Options) *Lister { return &Lister{opts: opts.withDefaults()} }

// List lists every project and returns the matching clusters, or an error (a
// scanner.DegradedError): InvalidSpec for bad filters or no project, Unauthorized when Google
// refuses the credentials, PartialListing when an answer has missingZones or some projects
// failed and others did not, ListFailed otherwise. The Credentials callback's error is returned
// unchanged.
func (l *Lister) List(ctx context.Context) ([]events.Cluster, error) {
	l.mu.Lock()
	defer l.mu.Unlock()

	if err := ValidateFilters(l.opts.Filters); err != nil {
		return nil, scanner.Degraded(events.DegradedInvalidSpec, err)
	}
	expr, err := gcloudfilter.Compile(l.opts.Filter)
	if err != nil {
		return nil, scanner.Degraded(events.DegradedInvalidSpec, fmt.Errorf("gke.filter: %w", err))
	}
	var creds Credentials
	if l.opts.Credentials != nil {
		if creds, err = l.opts.Credentials(ctx); err != nil {
			return nil, err
		}
	}
	projects := events.NormaliseSourceList(l.opts.Projects)
	if len(projects) == 0 {
		if creds.ProjectID == "" {
			return nil, scanner.Degradedf(events.DegradedInvalidSpec, "gke.projects is empty and the credentials name no project")
		}
		projects = []string{creds.ProjectID}
	}
	if err := l.prepare(ctx, creds); err != nil {
		return nil, err
	}

	var parts scanner.Parts
	for _, p := range projects {
		clusters, reason, err := l.listProject(ctx, p, expr)
		parts.Add("project "+p, clusters, reason, err)
	}
	return parts.Result()
}

// prepare builds the API client for creds, or keeps the current one.
func (l *Lister) prepare(ctx context.Context, creds Credentials) error {
	fp := creds.Fingerprint()
	if l.svc != nil && fp == l.fingerprint {
		return nil
	}
	opts := []option.ClientOption{
		option.WithScopes(container.CloudPlatformScope),
		option.WithUserAgent("enforcement-source-scanner"),
	}
	if l.opts.Endpoint != "" {
		opts = append(opts, option.WithEndpoint(l.opts.Endpoint))
	}
	if len(creds.KeyJSON) > 0 {
		opts = append(opts, option.WithCredentialsJSON(creds.KeyJSON))
	}
	// The client's own context only serves token refreshes started later; it must outlive
	// this scan.
	svc, err := container.NewService(context.WithoutCancel(ctx), opts...)
	if err != nil {
		// The auth library's messages describe the credential problem, not the key.
		return scanner.Degraded(events.DegradedSecretInvalid, fmt.Errorf("create the container API client: %w", err))
	}
	l.svc, l.fingerprint = svc, fp
	return nil
}

// listProject lists one project, with retries on 429 and 5xx, and returns its matching
// clusters or an error and its reason.
func (l *Lister) listProject(ctx context.Context, project string, expr *gcloudfilter.Filter) ([]events.Cluster, string, error) {
	parent := "projects/" + project + "/locations/-"
	var (
		resp *container.ListClustersResponse
		err  error
	)
	wait := l.opts.Backoff
	for attempt := 1; ; attempt++ {
		resp, err = l.svc.Projects.Locations.Clusters.List(parent).Context(ctx).Do()
		l.count(err)
		if err == nil || attempt >= l.opts.MaxAttempts || !retryable(err) || ctx.Err() != nil {
			break
		}
		d := wait/2 + rand.N(wait/2+1)
		wait = min(wait*2, 8*l.opts.Backoff)
		select {
		case <-ctx.Done():
			return nil, events.DegradedListFailed, fmt.Errorf("list %s: %w (after %d attempts, last: %w)", parent, ctx.Err(), attempt, err)
		case <-time.After(d):
		}
	}
	if err != nil {
		return nil, classify(err), fmt.Errorf("list %s: %w", parent, err)
	}
	if len(resp.MissingZones) > 0 {
		zones := slices.Clone(resp.MissingZones)
		sort.Strings(zones)
		return nil, events.DegradedPartial, fmt.Errorf("list %s: the answer misses zones %s", parent, strings.Join(zones, ", "))
	}
	var out []events.Cluster
	for i, c := range resp.Clusters {
		if c == nil {
			continue
		}
		obj, err := toMap(c)
		if err != nil {
			return nil, events.DegradedListFailed, fmt.Errorf("list %s: cluster #%d: %w", parent, i, err)
		}
		if !Matches(obj, project, l.opts.Filters) || !expr.Matches(obj) {
			continue
		}
		cl, err := convert(project, c, obj)
		if err != nil {
			return nil, events.DegradedListFailed, fmt.Errorf("list %s: cluster #%d: %w", parent, i, err)
		}
		out = append(out, cl)
	}
	return out, "", nil
}

func (l *Lister) count(err error) {
	if l.opts.Calls == nil {
		return
	}
	outcome := "success"
	var ge *googleapi.Error
	switch {
	case err == nil:
	case errors.As(err, &ge) && ge.Code == http.StatusTooManyRequests:
		outcome = "throttled"
	default:
		outcome = "error"
	}
	l.opts.Calls.WithLabelValues("ListClusters", outcome).Inc()
}

// retryable: throttling, server errors and transport errors (not the caller's deadline).
func retryable(err error) bool {
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		return ge.Code == http.StatusTooManyRequests || ge.Code >= 500
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && classify(err) != events.DegradedUnauthorized
}

// classify maps an error to a degraded reason: Unauthorized for 401/403 answers and failed
// token requests, ListFailed otherwise.
func classify(err error) string {
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		if ge.Code == http.StatusUnauthorized || ge.Code == http.StatusForbidden {
			return events.DegradedUnauthorized
		}
		return events.DegradedListFailed
	}
	msg := err.Error()
	if strings.Contains(msg, "oauth2") || strings.Contains(msg, "auth:") || strings.Contains(msg, "credentials") {
		return events.DegradedUnauthorized
	}
	return events.DegradedListFailed
}

func toMap(c *container.Cluster) (map[string]any, error) {
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode cluster: %w", err)
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("decode cluster: %w", err)
	}
	return obj, nil
}

// Convert turns a listed cluster into the scanner's cluster. Key is
// projects/<project>/locations/<location>/clusters/<name> (project as the source names it);
// Name is events.ObjectName of the cluster name (GKE names are already valid Kubernetes names,
// so it is unchanged in practice; a cluster versions before named otherwise keeps that name, see
// LegacyName); URL is https://<endpoint> ("" while the cluster has none);
// Labels are resourceLabels. Attributes are the cluster object as the API returns it (JSON
// field names) minus VolatileFields, plus: name, url, id (GKE's cluster id), location, project,
// resourceLabels (always a map), currentMasterVersion, status, and the Argo CD keys.
func Convert(project string, c *container.Cluster) (events.Cluster, error) {
	obj, err := toMap(c)
	if err != nil {
		return events.Cluster{}, err
	}
	return convert(project, c, obj)
}

// LegacyName is the name versions before 64-bit name suffixes gave a cluster Convert made:
// events.LegacyObjectName of its GKE name (the last segment of its Key). It is the scanner's
// Source.LegacyName for GKE sources, so that a cluster keeps the name it was published under.
func LegacyName(c events.Cluster) string {
	i := strings.LastIndex(c.Key, "/clusters/")
	if i < 0 {
		return ""
	}
	return events.LegacyObjectName(c.Key[i+len("/clusters/"):])
}

func convert(project string, c *container.Cluster, obj map[string]any) (events.Cluster, error) {
	if c.Name == "" || c.Location == "" {
		return events.Cluster{}, errors.New("the cluster has no name or location")
	}
	for _, f := range VolatileFields {
		delete(obj, f)
	}
	url := ""
	if c.Endpoint != "" {
		url = "https://" + c.Endpoint
	}
	labels := make(map[string]string, len(c.ResourceLabels))
	labelsAttr := make(map[string]any, len(c.ResourceLabels))
	for k, v := range c.ResourceLabels {
		labels[k] = v
		labelsAttr[k] = v
	}
	name := events.ObjectName(c.Name)
	obj["name"] = name
	obj["url"] = url
	obj["id"] = c.Id
	obj["location"] = c.Location
	obj["project"] = project
	obj["resourceLabels"] = labelsAttr
	obj["currentMasterVersion"] = c.CurrentMasterVersion
	obj["status"] = c.Status
	if c.MasterAuth != nil && c.MasterAuth.ClusterCaCertificate != "" {
		obj[AttrArgoCDCAData] = c.MasterAuth.ClusterCaCertificate
	}
	obj[AttrArgoCDExecCommand] = "argocd-k8s-auth"
	obj[AttrArgoCDExecArgs] = []any{"gcp"}
	obj[AttrArgoCDExecAPIVersion] = "client.authentication.k8s.io/v1beta1"
	return events.Cluster{
		Key:        "projects/" + project + "/locations/" + c.Location + "/clusters/" + c.Name,
		Name:       name,
		URL:        url,
		Labels:     labels,
		State:      c.Status,
		Eligible:   Eligible(c.Status),
		Attributes: obj,
	}, nil
}
