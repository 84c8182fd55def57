// Package eks lists the Amazon EKS clusters of one AWS account through the real aws-sdk-go-v2
// EKS client: ListClusters in every configured region (100 names a page, following NextToken),
// and DescribeCluster for what a name alone does not tell (endpoint, status, tags, CA).
//
// Why a Lister keeps state. ListClusters returns names only, so without DescribeCluster a tag
// change or a status change would be invisible; describing every cluster at every scan would cost
// N calls per scan and runs into EKS's API throttling on large fleets. The Lister therefore keeps
// the described clusters in memory, keyed by ARN: a new name is described at once, a cluster in
// a transitional status (CREATING, UPDATING, DELETING, PENDING) at every scan so that becoming
// ACTIVE is seen promptly, and an ACTIVE or FAILED cluster again only after RedescribeInterval. A
// steady scan of N unchanged ACTIVE clusters costs one ListClusters page per 100 clusters and
// region, and no DescribeCluster call. The cache is dropped when the credentials change (another
// account may have clusters of the same names).
//
// The scanner gets the listing a ListClusters page at a time (ListPages), described, so that it
// holds one page of a large account rather than all of it. The listing must be complete or fail: a
// failed page, a failed DescribeCluster (after the SDK's retries) or a failed region makes the
// whole listing an error (a scanner.DegradedError), and the scanner changes nothing for a listing
// that ends in an error, so it never mistakes a short listing for removed clusters. A cluster that
// disappears between ListClusters and DescribeCluster (ResourceNotFoundException) is simply not
// listed: it is gone.
//
// Throttling is handled by the SDK's adaptive retry mode (client-side rate limiting plus
// exponential backoff with jitter); every HTTP attempt is counted by operation and outcome.
//
// Secrets never appear in errors or logs: the SDK's error messages carry the operation, the HTTP
// status, the request id and the service's message, never the request's credentials.
package eks

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	awseks "github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
)

// DefaultRedescribeInterval is how long an ACTIVE (or FAILED) cluster's description is trusted
// before it is described again (to see tag, version and endpoint changes).
const DefaultRedescribeInterval = 10 * time.Minute

// EnvRedescribeInterval is the environment variable the service reads RedescribeInterval from
// (a Go duration, e.g. "10m"); the wiring parses it with service.Duration.
const EnvRedescribeInterval = "EKS_REDESCRIBE_INTERVAL"

// pageSize is ListClusters' MaxResults: the largest page EKS serves.
const pageSize = 100

// Attribute keys for Argo CD registration without long-lived tokens. argo-syncer builds the
// cluster Secret's config from them: {"awsAuthConfig": {"clusterName": <AttrArgoCDClusterName>,
// "roleARN": <AttrArgoCDRoleARN, when set>}, "tlsClientConfig": {"caData": <AttrArgoCDCAData>}}.
const (
	// AttrArgoCDClusterName is the EKS cluster name as AWS knows it (not normalised), which
	// argocd-k8s-auth needs to mint a token.
	AttrArgoCDClusterName = "argocd.awsAuthConfig.clusterName"
	// AttrArgoCDRoleARN is the Secret's role_arn; absent when the Secret has none.
	AttrArgoCDRoleARN = "argocd.awsAuthConfig.roleARN"
	// AttrArgoCDCAData is certificateAuthority.data: the base64 of the cluster CA's PEM, exactly
	// the form of Argo CD's tlsClientConfig.caData in the Secret's JSON config.
	AttrArgoCDCAData = "argocd.caData"
)

// Statuses of an EKS cluster (DescribeCluster's status).
const (
	StatusActive   = "ACTIVE"
	StatusUpdating = "UPDATING"
)

// transitional reports whether a status is on its way to another (CREATING, UPDATING,
// DELETING, PENDING): such clusters are described at every scan, so that becoming ACTIVE (or
// going away) is seen at once. ACTIVE and FAILED clusters follow RedescribeInterval.
func transitional(status string) bool {
	switch status {
	case "CREATING", StatusUpdating, "DELETING", "PENDING":
		return true
	}
	return false
}

// Eligible reports whether a cluster in this status may receive new installs: ACTIVE or
// UPDATING. CREATING waits; DELETING and FAILED keep what they have until they are gone.
func Eligible(status string) bool { return status == StatusActive || status == StatusUpdating }

// Credentials are what an EKS source Secret holds (events.ParseEKSSecret reads them, naming the
// Secret keys in its errors). The zero value means the SDK's default chain.
type Credentials = events.EKSCredentials

// Options configure a Lister. Only Regions is needed in production; the zero value of every
// other field is its default.
type Options struct {
	// Regions to list (spec.source.eks.regions). Empty: the default chain's region (AWS_REGION
	// or the shared config's), and an InvalidSpec error when there is none.
	Regions []string
	// Credentials returns the source Secret's credentials at each scan (so a fixed Secret takes
	// effect without a restart). Its error is returned as is (wrap it in a DegradedError with
	// reason SecretInvalid). Nil: the default chain.
	Credentials func(ctx context.Context) (Credentials, error)
	// RedescribeInterval is how long an ACTIVE or FAILED cluster's description is trusted
	// (EKS_REDESCRIBE_INTERVAL; default DefaultRedescribeInterval). Each cluster's next
	// re-describe falls in the last tenth of the interval, spread by its ARN, so that a fleet
	// described at once is not re-described in one burst.
	RedescribeInterval time.Duration
	// DescribeConcurrency bounds the DescribeCluster calls in flight per region (default 8).
	DescribeConcurrency int
	// Calls counts every HTTP attempt (retries included) by operation (ListClusters,
	// DescribeCluster, AssumeRole) and outcome (success, throttled, error); see NewCallsCounter.
	// Nil: not counted.
	Calls *prometheus.CounterVec
	// Endpoint overrides the EKS endpoint (tests, VPC interface endpoints); STSEndpoint the STS
	// endpoint used to assume role_arn.
	Endpoint    string
	STSEndpoint string
	// HTTPClient overrides the SDK's HTTP client.
	HTTPClient aws.HTTPClient
	// MaxAttempts (default 5) and MaxBackoff (default 20s) tune the retryer.
	MaxAttempts int
	MaxBackoff  time.Duration
	// RetryMode is aws.RetryModeAdaptive (the default: client-side rate limiting that slows
	// down after throttling, on top of exponential backoff) or aws.RetryModeStandard (backoff
	// only; tests use it, since adaptive mode may wait seconds after a throttle).
	RetryMode aws.RetryMode
	// Now is the clock; tests inject one so that the re-describe interval passes without sleeping.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.RedescribeInterval <= 0 {
		o.RedescribeInterval = DefaultRedescribeInterval
	}
	if o.DescribeConcurrency <= 0 {
		o.DescribeConcurrency = 8
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 5
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 20 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.RetryMode == "" {
		o.RetryMode = aws.RetryModeAdaptive
	}
	return o
}

// NewCallsCounter registers and returns the API call counter for Options.Calls:
// enforcement_source_scanner_eks_api_calls_total{operation, outcome}.
func NewCallsCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	return scanner.NewAPICallsCounter(reg, "enforcement_source_scanner_eks_api_calls_total",
		"AWS API calls (HTTP attempts, retries included) made to list EKS clusters, by operation and outcome (success, throttled, error).")
}

// Lister lists the EKS clusters of one source. Keep one Lister per source for the life of the
// process: its describe cache is what makes steady scans cheap. It is safe for concurrent use
// (concurrent Lists are serialised).
type Lister struct {
	opts Options

	mu          sync.Mutex
	fingerprint string     // of the credentials cfg and cache belong to
	cfg         aws.Config // built for those credentials
	client      *awseks.Client
	cache       map[string]*entry // by ARN
	byName      map[string]string // region/name → ARN
}

// entry is one described cluster.
type entry struct {
	cluster     events.Cluster
	describedAt time.Time
}

// NewLister returns a Lister with opts.
func NewLister(opts Options) *Lister {
	return &Lister{opts: opts.withDefaults(), cache: map[string]*entry{}, byName: map[string]string{}}
}

// List lists every region and returns every cluster sorted by key, or the error ListPages
// returns.
func (l *Lister) List(ctx context.Context) ([]events.Cluster, error) {
	clusters, err := scanner.ListAll(ctx, l.ListPages)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(clusters, func(a, b events.Cluster) int { return strings.Compare(a.Key, b.Key) })
	return clusters, nil
}

// ListPages lists every region and hands each page of ListClusters over to each once its
// clusters are described (scanner.PagedLister), so that the scanner diffs a large account a page
// at a time. It returns each's error as is, or an error (a scanner.DegradedError): Unauthorized
// when AWS refuses the credentials, PartialListing when some regions (or a page after the first)
// failed and others did not, InvalidSpec without any region, ListFailed otherwise. The
// Credentials callback's error is returned unchanged. After a region failed, the regions after
// it are still listed and described, so that the error names each failing region and the next
// scan has less to describe, but their pages are not handed over.
func (l *Lister) ListPages(ctx context.Context, each func([]events.Cluster) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()

	var creds Credentials
	if l.opts.Credentials != nil {
		var err error
		if creds, err = l.opts.Credentials(ctx); err != nil {
			return err
		}
	}
	if err := l.prepare(ctx, creds); err != nil {
		return err
	}
	regions := events.NormaliseSourceList(l.opts.Regions)
	if len(regions) == 0 {
		if l.cfg.Region == "" {
			return scanner.Degradedf(events.DegradedInvalidSpec, "eks.regions is empty and the default credential chain names no region (AWS_REGION)")
		}
		regions = []string{l.cfg.Region}
	}

	parts := scanner.Parts{Each: each}
	for _, region := range regions {
		partial, err := l.listRegion(ctx, region, creds.RoleARN, parts.Page)
		if err := parts.Stopped(); err != nil {
			return err
		}
		reason := ""
		if err != nil {
			if reason = classify(err); reason != events.DegradedUnauthorized && partial {
				reason = events.DegradedPartial
			}
		}
		parts.Done("region "+region, reason, err)
	}
	return parts.Err()
}

var _ scanner.PagedLister = (*Lister)(nil)

// prepare builds the SDK config for creds, or keeps the current one when they did not change.
// A change drops the describe cache.
func (l *Lister) prepare(ctx context.Context, creds Credentials) error {
	fp := creds.Fingerprint()
	if fp == l.fingerprint && l.client != nil {
		return nil
	}
	cfg, err := l.awsConfig(ctx, creds)
	if err != nil {
		return err
	}
	l.fingerprint, l.cfg = fp, cfg
	l.client = awseks.NewFromConfig(cfg, func(o *awseks.Options) {
		if l.opts.Endpoint != "" {
			o.BaseEndpoint = aws.String(l.opts.Endpoint)
		}
	})
	l.cache, l.byName = map[string]*entry{}, map[string]string{}
	return nil
}

// awsConfig builds the SDK config: static keys from the Secret (without reading the
// environment or shared files, so nothing on the host can redirect them) or the default chain,
// then role_arn through STS; adaptive retries and call counting either way.
func (l *Lister) awsConfig(ctx context.Context, creds Credentials) (aws.Config, error) {
	tune := func(so *retry.StandardOptions) {
		so.MaxAttempts = l.opts.MaxAttempts
		so.MaxBackoff = l.opts.MaxBackoff
	}
	retryer := func() aws.Retryer {
		if l.opts.RetryMode == aws.RetryModeStandard {
			return retry.NewStandard(tune)
		}
		return retry.NewAdaptiveMode(func(o *retry.AdaptiveModeOptions) {
			o.StandardOptions = append(o.StandardOptions, tune)
		})
	}
	var cfg aws.Config
	if creds.AccessKeyID != "" {
		cfg = aws.Config{
			Credentials: aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(
				creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken)),
			Retryer:    retryer,
			HTTPClient: l.opts.HTTPClient,
			Region:     firstNonEmpty(events.NormaliseSourceList(l.opts.Regions)...),
			AppID:      "enforcement-source-scanner",
		}
		if cfg.HTTPClient == nil {
			cfg.HTTPClient = awshttp.NewBuildableClient()
		}
	} else {
		loadOpts := []func(*awsconfig.LoadOptions) error{awsconfig.WithRetryer(retryer), awsconfig.WithAppID("enforcement-source-scanner")}
		if l.opts.HTTPClient != nil {
			loadOpts = append(loadOpts, awsconfig.WithHTTPClient(l.opts.HTTPClient))
		}
		var err error
		cfg, err = awsconfig.LoadDefaultConfig(ctx, loadOpts...)
		if err != nil {
			return aws.Config{}, scanner.Degraded(events.DegradedSecretInvalid, fmt.Errorf("load the default AWS configuration: %w", err))
		}
	}
	cfg.APIOptions = append(cfg.APIOptions, l.countCalls)
	if creds.RoleARN != "" {
		region := cfg.Region
		if region == "" {
			region = firstNonEmpty(events.NormaliseSourceList(l.opts.Regions)...)
		}
		stsClient := sts.NewFromConfig(cfg, func(o *sts.Options) {
			if region != "" {
				o.Region = region
			}
			if l.opts.STSEndpoint != "" {
				o.BaseEndpoint = aws.String(l.opts.STSEndpoint)
			}
		})
		cfg.Credentials = aws.NewCredentialsCache(stscreds.NewAssumeRoleProvider(stsClient, creds.RoleARN, func(o *stscreds.AssumeRoleOptions) {
			o.RoleSessionName = "enforcement-source-scanner"
		}))
	}
	return cfg, nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// countCalls adds a middleware after the retry loop, so that it sees every HTTP attempt with
// its deserialised outcome.
func (l *Lister) countCalls(stack *middleware.Stack) error {
	if l.opts.Calls == nil {
		return nil
	}
	return stack.Finalize.Insert(middleware.FinalizeMiddlewareFunc("EnforcementCountCalls",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleFinalize(ctx, in)
			l.opts.Calls.WithLabelValues(awsmiddleware.GetOperationName(ctx), outcome(err)).Inc()
			return out, md, err
		}), "Retry", middleware.After)
}

// outcome is the outcome label of one attempt.
func outcome(err error) string {
	switch {
	case err == nil:
		return "success"
	case retry.IsErrorThrottles(retry.DefaultThrottles).IsErrorThrottle(err) == aws.TrueTernary:
		return "throttled"
	default:
		return "error"
	}
}

// unauthorizedCodes are the AWS error codes that mean the credentials were refused.
var unauthorizedCodes = map[string]bool{
	"AccessDeniedException": true, "AccessDenied": true, "UnauthorizedException": true,
	"UnrecognizedClientException": true, "InvalidClientTokenId": true, "InvalidSignatureException": true,
	"SignatureDoesNotMatch": true, "ExpiredToken": true, "ExpiredTokenException": true,
	"IncompleteSignature": true, "MissingAuthenticationToken": true,
}

// classify maps an SDK error to a degraded reason: Unauthorized for refused or unobtainable
// credentials (including a failed AssumeRole), ListFailed otherwise.
func classify(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) && unauthorizedCodes[ae.ErrorCode()] {
		return events.DegradedUnauthorized
	}
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) && (re.HTTPStatusCode() == http.StatusUnauthorized || re.HTTPStatusCode() == http.StatusForbidden) {
		return events.DegradedUnauthorized
	}
	if strings.Contains(err.Error(), "failed to retrieve credentials") || strings.Contains(err.Error(), "failed to refresh cached credentials") {
		return events.DegradedUnauthorized
	}
	return events.DegradedListFailed
}

// listRegion lists one region page by page: it describes what in each page needs describing
// and hands the page's clusters to page. partial is true when a page after the first failed.
// Once a description failed, the region's later pages are still listed and described, but no
// longer handed over, and the error joins the failed descriptions.
func (l *Lister) listRegion(ctx context.Context, region, roleARN string, page func([]events.Cluster) error) (partial bool, err error) {
	inRegion := func(o *awseks.Options) { o.Region = region }
	listed := map[string]bool{}
	var failed []error
	err = l.listNames(ctx, inRegion, func(names []string) error {
		names = slices.DeleteFunc(names, func(n string) bool {
			seen := listed[n]
			listed[n] = true
			return seen
		})
		now := l.opts.Now()
		results := l.describe(ctx, l.dueForDescribe(region, names, now), region, roleARN, inRegion)
		gone, errs := l.remember(region, results, now)
		failed = append(failed, errs...)
		if len(failed) > 0 {
			return nil
		}
		clusters := make([]events.Cluster, 0, len(names))
		for _, name := range names {
			if gone[name] {
				continue
			}
			e := l.cache[l.byName[region+"/"+name]]
			if e == nil {
				return fmt.Errorf("cluster %s: no description (internal error)", name)
			}
			clusters = append(clusters, cloneCluster(e.cluster))
		}
		return page(clusters)
	})
	var lerr *listNamesError
	switch {
	case errors.As(err, &lerr):
		return lerr.partial, lerr.err
	case err != nil:
		return false, err
	case len(failed) > 0:
		return false, joinFirst(failed, 3)
	}
	l.forgetUnlisted(region, listed)
	return false, nil
}

// listNamesError is a failure of ListClusters; partial is true when a page after the first
// failed.
type listNamesError struct {
	partial bool
	err     error
}

func (e *listNamesError) Error() string { return e.err.Error() }
func (e *listNamesError) Unwrap() error { return e.err }

// listNames pages through ListClusters and hands each page's names to each, in order; each's
// error stops it and is returned as is. A failed page, or a nextToken that comes back twice,
// is a *listNamesError.
func (l *Lister) listNames(ctx context.Context, inRegion func(*awseks.Options), each func([]string) error) error {
	var token *string
	seen := map[string]bool{}
	for page := 1; ; page++ {
		out, err := l.client.ListClusters(ctx, &awseks.ListClustersInput{MaxResults: aws.Int32(pageSize), NextToken: token}, inRegion)
		if err != nil {
			return &listNamesError{page > 1, fmt.Errorf("ListClusters page %d: %w", page, err)}
		}
		if err := each(out.Clusters); err != nil {
			return err
		}
		if out.NextToken == nil || *out.NextToken == "" {
			return nil
		}
		if seen[*out.NextToken] {
			return &listNamesError{true, fmt.Errorf("ListClusters page %d: the same nextToken came back twice; pagination does not end", page)}
		}
		seen[*out.NextToken] = true
		token = out.NextToken
	}
}

// dueForDescribe returns the names that have no cached description, are in a transitional
// state, or whose description is older than their refresh interval.
func (l *Lister) dueForDescribe(region string, names []string, now time.Time) []string {
	var todo []string
	for _, name := range names {
		e := l.cache[l.byName[region+"/"+name]]
		if e == nil || transitional(e.cluster.State) || now.Sub(e.describedAt) >= l.dueAfter(e.cluster.Key) {
			todo = append(todo, name)
		}
	}
	return todo
}

// described is the outcome of one DescribeCluster: a cluster, an error, or neither when the
// cluster was deleted between ListClusters and DescribeCluster.
type described struct {
	name    string
	cluster *events.Cluster
	err     error
}

// describe calls DescribeCluster for every name, at most DescribeConcurrency at a time, and
// returns one result per name in the same order.
func (l *Lister) describe(ctx context.Context, todo []string, region, roleARN string, inRegion func(*awseks.Options)) []described {
	results := make([]described, len(todo))
	scanner.Parallel(len(todo), l.opts.DescribeConcurrency, func(i int) {
		results[i] = l.describeOne(ctx, todo[i], region, roleARN, inRegion)
	})
	return results
}

// describeOne describes one cluster and converts it.
func (l *Lister) describeOne(ctx context.Context, name, region, roleARN string, inRegion func(*awseks.Options)) described {
	r := described{name: name}
	out, err := l.client.DescribeCluster(ctx, &awseks.DescribeClusterInput{Name: aws.String(name)}, inRegion)
	var nf *ekstypes.ResourceNotFoundException
	switch {
	case errors.As(err, &nf):
		// Deleted between ListClusters and DescribeCluster: gone, not an error.
	case err != nil:
		r.err = fmt.Errorf("DescribeCluster %s: %w", name, err)
	case out.Cluster == nil:
		r.err = fmt.Errorf("DescribeCluster %s: the answer has no cluster", name)
	default:
		c, err := Convert(region, out.Cluster, roleARN)
		if err != nil {
			r.err = fmt.Errorf("DescribeCluster %s: %w", name, err)
		}
		r.cluster = &c
	}
	return r
}

// remember caches every successful description, even when another failed (the next scan then
// has less to do), drops the clusters that turned out to be gone and returns their names and the
// failed descriptions' errors.
func (l *Lister) remember(region string, results []described, now time.Time) (gone map[string]bool, errs []error) {
	gone = map[string]bool{}
	for _, r := range results {
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
		case r.cluster == nil:
			gone[r.name] = true
			delete(l.cache, l.byName[region+"/"+r.name])
			delete(l.byName, region+"/"+r.name)
		default:
			if old := l.byName[region+"/"+r.name]; old != "" && old != r.cluster.Key {
				delete(l.cache, old)
			}
			l.cache[r.cluster.Key] = &entry{cluster: *r.cluster, describedAt: now}
			l.byName[region+"/"+r.name] = r.cluster.Key
		}
	}
	return gone, errs
}

// forgetUnlisted drops the region's cached clusters that are no longer listed.
func (l *Lister) forgetUnlisted(region string, listed map[string]bool) {
	for key, arn := range l.byName {
		if r, n, _ := strings.Cut(key, "/"); r == region && !listed[n] {
			delete(l.cache, arn)
			delete(l.byName, key)
		}
	}
}

// joinFirst joins the first n errors and counts the rest, so that a fleet-wide failure makes a
// readable status message rather than one line per cluster.
func joinFirst(errs []error, n int) error {
	if len(errs) <= n {
		return errors.Join(errs...)
	}
	return fmt.Errorf("%w\n(and %d more failures)", errors.Join(errs[:n]...), len(errs)-n)
}

// dueAfter is how old an ACTIVE cluster's description may get: between 90% and 100% of
// RedescribeInterval, fixed per ARN.
func (l *Lister) dueAfter(arn string) time.Duration {
	sum := sha256.Sum256([]byte(arn))
	frac := float64(binary.BigEndian.Uint16(sum[:2])) / 65535
	iv := l.opts.RedescribeInterval
	return iv - time.Duration(frac*float64(iv)/10)
}

// cloneCluster copies the maps of a cached cluster, so that the scanner may keep what List
// returns while the cache changes.
func cloneCluster(c events.Cluster) events.Cluster {
	c.Attributes, _ = deepCopy(c.Attributes).(map[string]any)
	labels := make(map[string]string, len(c.Labels))
	for k, v := range c.Labels {
		labels[k] = v
	}
	c.Labels = labels
	return c
}

// deepCopy copies a decoded JSON value (maps, slices and scalars).
func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, val := range t {
			out[k] = deepCopy(val)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, val := range t {
			out[i] = deepCopy(val)
		}
		return out
	default:
		return v
	}
}

// Convert turns a described cluster into the scanner's cluster. Name is the EKS name made a
// valid Kubernetes name by events.ObjectName (unchanged when it already is one: lower-case
// letters, digits and '-', at most 63 characters; otherwise lower-cased, other characters
// replaced by '-', and a 16-hex-digit (64-bit) hash suffix added, so that no EKS name can be
// crafted to normalise to another's). A cluster that versions before named with the 8-digit
// suffix keeps that name (LegacyName, kept by the scanner). Attributes are every field
// DescribeCluster returns, under its API (lowerCamel) name, minus certificateAuthority (moved
// to AttrArgoCDCAData), clientRequestToken and connectorConfig.activationCode, plus: name (the
// normalised name), url (the endpoint), id (the ARN; EKS's own outpost cluster id stays under
// outpostId), region, version, tags, status, platformVersion, arn, createdAt (RFC 3339), and
// the Argo CD keys. roleARN is the Secret's role_arn ("" for none).
func Convert(region string, c *ekstypes.Cluster, roleARN string) (events.Cluster, error) {
	name, arn := aws.ToString(c.Name), aws.ToString(c.Arn)
	if name == "" || arn == "" {
		return events.Cluster{}, errors.New("the cluster has no name or arn")
	}
	raw, err := json.Marshal(c)
	if err != nil {
		return events.Cluster{}, fmt.Errorf("encode cluster: %w", err)
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return events.Cluster{}, fmt.Errorf("decode cluster: %w", err)
	}
	attrs, _ := lowerCamel(obj).(map[string]any)
	if attrs == nil {
		attrs = map[string]any{}
	}
	delete(attrs, "certificateAuthority")
	delete(attrs, "clientRequestToken")
	if cc, ok := attrs["connectorConfig"].(map[string]any); ok {
		delete(cc, "activationCode")
	}
	if id, ok := attrs["id"]; ok {
		attrs["outpostId"] = id
	}
	status := string(c.Status)
	tags := map[string]string{}
	for k, v := range c.Tags {
		tags[k] = v
	}
	tagsAttr := make(map[string]any, len(tags))
	for k, v := range tags {
		tagsAttr[k] = v
	}
	url := aws.ToString(c.Endpoint)
	norm := events.ObjectName(name)
	attrs["name"] = norm
	attrs["url"] = url
	attrs["id"] = arn
	attrs["arn"] = arn
	attrs["region"] = region
	attrs["version"] = aws.ToString(c.Version)
	attrs["platformVersion"] = aws.ToString(c.PlatformVersion)
	attrs["status"] = status
	attrs["tags"] = tagsAttr
	if c.CreatedAt != nil {
		attrs["createdAt"] = c.CreatedAt.UTC().Format(time.RFC3339)
	}
	attrs[AttrArgoCDClusterName] = name
	if roleARN != "" {
		attrs[AttrArgoCDRoleARN] = roleARN
	}
	if c.CertificateAuthority != nil && aws.ToString(c.CertificateAuthority.Data) != "" {
		attrs[AttrArgoCDCAData] = aws.ToString(c.CertificateAuthority.Data)
	}
	return events.Cluster{
		Key:        arn,
		Name:       norm,
		URL:        url,
		Labels:     tags,
		State:      status,
		Eligible:   Eligible(status),
		Attributes: attrs,
	}, nil
}

// LegacyName is the name versions before 64-bit name suffixes gave a cluster Convert made:
// events.LegacyObjectName of its EKS name (AttrArgoCDClusterName), "" when c has none. It is the
// scanner's Source.LegacyName for EKS sources: a cluster the inventory remembers under it keeps
// it, because its Argo CD destination and objects are named after it.
func LegacyName(c events.Cluster) string {
	name, _ := c.Attributes[AttrArgoCDClusterName].(string)
	if name == "" {
		return ""
	}
	return events.LegacyObjectName(name)
}

// lowerCamel renames the keys of a JSON value from the SDK's Go field names to the API's
// member names (Arn → arn, ResourcesVpcConfig → resourcesVpcConfig) and drops nulls and empty
// strings (the SDK's enum fields are plain strings, "" when the API did not send them). The keys
// of tags maps are values, not field names, and are kept as they are.
func lowerCamel(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, val := range t {
			if val == nil || val == "" {
				continue
			}
			nk := k
			if k != "" && k[0] >= 'A' && k[0] <= 'Z' {
				nk = strings.ToLower(k[:1]) + k[1:]
			}
			if nk == "tags" {
				out[nk] = val
				continue
			}
			out[nk] = lowerCamel(val)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, val := range t {
			out[i] = lowerCamel(val)
		}
		return out
	default:
		return v
	}
}
