// Package aks lists the Azure Kubernetes Service managed clusters of one or more subscriptions
// through the real armcontainerservice client: one ManagedClusters List per subscription, or one
// ListByResourceGroup per subscription and resource group when the source names resource
// groups, each following ARM's nextLink paging.
//
// The scanner gets the listing a page at a time (ListPages), so that it holds one page of a large
// fleet rather than all of it. The listing must be complete or fail. A failed scope, a page that
// fails after the first, a nextLink that comes back twice or a body that does not decode makes the
// whole listing an error (a scanner.DegradedError), and the scanner changes nothing for a listing
// that ends in an error, so it never mistakes a short listing for removed clusters. Throttling
// (429, honouring Retry-After) and 5xx answers are retried by azcore's retry policy first.
//
// A stopped cluster (power state Stopped) is listed, present but not eligible: stopping a
// cluster for the night must never look like its removal.
//
// Argo CD registers AKS clusters with argocd-k8s-auth azure and workload identity, so the
// scanner publishes no credential, only the cluster's CA, which ARM does not return in the list:
// it comes from listClusterUserCredential (the kubeconfig `az aks get-credentials` writes), asked
// once per cluster, when the Lister first sees it, and kept (ARM rotates an AKS CA only on an
// explicit certificate rotation).
//
// Secrets never appear in errors or logs: the client secret stays inside azidentity, and error
// messages carry ARM's status, code and message only.
package aks

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/containerservice/armcontainerservice/v6"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
)

// Attribute keys for Argo CD registration through its exec provider, as Argo CD documents AKS
// (argocd-k8s-auth azure with workload identity: the AZURE_* variables the workload identity
// webhook injects into Argo CD's pods, and AAD_LOGIN_METHOD=workloadidentity). argo-syncer
// builds the cluster Secret's config from them: {"execProviderConfig": {"command": <command>,
// "args": <args>, "env": <env>, "apiVersion": <apiVersion>}, "tlsClientConfig": {"caData":
// <AttrArgoCDCAData>}}.
const (
	// AttrArgoCDCAData is the base64 of the cluster CA's PEM (the kubeconfig's
	// certificate-authority-data), the form of Argo CD's tlsClientConfig.caData in JSON.
	AttrArgoCDCAData = "argocd.caData"
	// AttrArgoCDExecCommand is "argocd-k8s-auth".
	AttrArgoCDExecCommand = "argocd.execProviderConfig.command"
	// AttrArgoCDExecArgs is ["azure"].
	AttrArgoCDExecArgs = "argocd.execProviderConfig.args"
	// AttrArgoCDExecEnv is {"AAD_LOGIN_METHOD": "workloadidentity"}.
	AttrArgoCDExecEnv = "argocd.execProviderConfig.env"
	// AttrArgoCDExecAPIVersion is "client.authentication.k8s.io/v1beta1".
	AttrArgoCDExecAPIVersion = "argocd.execProviderConfig.apiVersion"
)

// Power states and provisioning states of a managed cluster.
const (
	PowerRunning = "Running"
	PowerStopped = "Stopped"

	ProvisioningSucceeded = "Succeeded"
)

// eligibleProvisioning are the provisioning states in which a running cluster takes new
// installs: settled, or changing in place (an upgrade or scale keeps the API server serving).
var eligibleProvisioning = map[string]bool{ProvisioningSucceeded: true, "Updating": true, "Upgrading": true, "Scaling": true}

// State is a cluster's state as published: the power state once provisioning has succeeded
// ("Running", "Stopped"), else the provisioning state ("Creating", "Updating", "Stopping",
// "Starting", "Deleting", "Failed", "Canceled", ...).
func State(provisioning, power string) string {
	if provisioning == ProvisioningSucceeded && power != "" {
		return power
	}
	return provisioning
}

// Eligible reports whether a cluster may receive new installs: power state Running in an
// eligible provisioning state (Succeeded, Updating, Upgrading, Scaling). Creating waits;
// Stopped, Stopping, Deleting, Failed and Canceled keep what they have.
func Eligible(provisioning, power string) bool {
	return power == PowerRunning && eligibleProvisioning[provisioning]
}

// VolatileFields are fields of the cluster object (under "properties") left out of the
// attributes: agent pool node counts and states change under the autoscaler and on every
// start/stop without a change a template cares about, and each change would re-render every
// rule. servicePrincipalProfile and windowsProfile may hold a service principal secret and the
// Windows admin password.
var VolatileFields = []string{"agentPoolProfiles", "servicePrincipalProfile", "windowsProfile"}

// Credentials are what an aks source Secret holds (events.ParseAKSSecret reads them, naming the
// Secret key in its errors). The zero value means the ambient identity.
type Credentials = events.AKSCredentials

// Options configure a Lister. Subscriptions (or a Secret with subscription_id) is needed; the
// zero value of every other field is its default.
type Options struct {
	// Subscriptions to list (spec.source.aks.subscriptions). Empty: the Secret's
	// subscription_id, and an InvalidSpec error without one.
	Subscriptions []string
	// ResourceGroups (spec.source.aks.resourceGroups): list only these resource groups of each
	// subscription.
	ResourceGroups []string
	// Credentials returns the source Secret's credentials at each scan (so a fixed Secret takes
	// effect without a restart). Its error is returned as is (wrap it in a DegradedError with
	// reason SecretInvalid). Nil or zero Credentials: the ambient identity (AmbientCredential).
	Credentials func(ctx context.Context) (Credentials, error)
	// Endpoint overrides the Azure Resource Manager endpoint (default
	// https://management.azure.com; sovereign clouds, Azure Stack Hub, tests). The token
	// audience follows it. The Microsoft Entra authority host is azidentity's
	// AZURE_AUTHORITY_HOST (default the public cloud's).
	Endpoint string
	// HTTPClient sends every request, ARM's and the token endpoint's (default a client with the
	// system's roots; AKS_CA_FILE adds a private CA).
	HTTPClient *http.Client
	// MaxRetries bounds the retries of one request on 408, 429 and 5xx answers and network
	// errors (default 3); RetryDelay is the first backoff, doubled each time up to
	// MaxRetryDelay (defaults 1s and 20s). A Retry-After longer than MaxRetryDelay is not waited
	// for: the listing fails (throttled) and the next scan tries again.
	MaxRetries    int
	RetryDelay    time.Duration
	MaxRetryDelay time.Duration
	// CAFetchConcurrency bounds the listClusterUserCredential calls in flight (default 8).
	CAFetchConcurrency int
	// Calls counts every attempt by operation (List, ListByResourceGroup,
	// ListClusterUserCredentials, Token) and outcome (success, throttled, error); see
	// NewCallsCounter. Nil: not counted.
	Calls *prometheus.CounterVec
}

func (o Options) withDefaults() Options {
	if o.MaxRetries <= 0 {
		o.MaxRetries = 3
	}
	if o.RetryDelay <= 0 {
		o.RetryDelay = time.Second
	}
	if o.MaxRetryDelay <= 0 {
		o.MaxRetryDelay = 20 * time.Second
	}
	if o.CAFetchConcurrency <= 0 {
		o.CAFetchConcurrency = 8
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 60 * time.Second}
	}
	return o
}

// NewCallsCounter registers and returns the API call counter for Options.Calls:
// enforcement_source_scanner_aks_api_calls_total{operation, outcome}.
func NewCallsCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	return scanner.NewAPICallsCounter(reg, "enforcement_source_scanner_aks_api_calls_total",
		"Azure Resource Manager and Microsoft Entra token calls (attempts, retries included) made to list AKS clusters, by operation and outcome (success, throttled, error).")
}

// Lister lists the AKS clusters of one source. Keep one per source: it keeps the credential
// (and so its token) and the clusters' CAs between scans. It is safe for concurrent use
// (concurrent Lists are serialised).
type Lister struct {
	opts Options

	mu          sync.Mutex
	fingerprint string
	cred        azcore.TokenCredential
	clients     map[string]*armcontainerservice.ManagedClustersClient // by subscription
	// ca holds the base64 CA of every cluster fetched so far, by Key.
	ca map[string]string
}

// NewLister returns a Lister with opts.
func NewLister(opts Options) *Lister {
	return &Lister{opts: opts.withDefaults(), ca: map[string]string{}}
}

// List lists every subscription (or resource group) and returns the clusters sorted by key, or
// the error ListPages returns.
func (l *Lister) List(ctx context.Context) ([]events.Cluster, error) {
	clusters, err := scanner.ListAll(ctx, l.ListPages)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(clusters, func(a, b events.Cluster) int { return strings.Compare(a.Key, b.Key) })
	return clusters, nil
}

// ListPages lists every subscription (or resource group) and hands each page ARM returns over to
// each, with the CAs of its clusters (scanner.PagedLister), so that the scanner diffs a large
// fleet a page at a time. It returns each's error as is, or an error (a scanner.DegradedError):
// InvalidSpec with no subscription, SecretInvalid when no credential can be built, Unauthorized
// when Microsoft Entra or ARM refuses the credentials, PartialListing when a page after the
// first failed or some scopes failed and others did not, ListFailed otherwise. The Credentials
// callback's error is returned unchanged. After a scope failed, the scopes after it are still
// listed, so that the error names each failing scope, but their pages are not handed over.
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
	subs := events.NormaliseSourceList(lower(l.opts.Subscriptions))
	if len(subs) == 0 {
		if creds.SubscriptionID == "" {
			return scanner.Degradedf(events.DegradedInvalidSpec, "aks.subscriptions is empty and the Secret names no %s", events.SecretKeyAzureSubscriptionID)
		}
		subs = []string{strings.ToLower(creds.SubscriptionID)}
	}
	if err := l.prepare(creds); err != nil {
		return err
	}
	groups := events.NormaliseSourceList(lower(l.opts.ResourceGroups))

	listed := map[string]bool{} // the keys handed over, whose CAs are kept
	parts := scanner.Parts{Each: func(page []events.Cluster) error {
		l.withCAs(ctx, page)
		for i := range page {
			listed[page[i].Key] = true
		}
		return each(page)
	}}
	scope := func(name string, client *armcontainerservice.ManagedClustersClient, sub, rg string) error {
		reason, err := l.listScope(ctx, client, sub, rg, parts.Page)
		if err := parts.Stopped(); err != nil {
			return err
		}
		parts.Done(name, reason, err)
		return nil
	}
	for _, sub := range subs {
		client, err := l.client(sub)
		if err != nil {
			parts.Done("subscription "+sub, events.DegradedListFailed, err)
			continue
		}
		if len(groups) == 0 {
			if err := scope("subscription "+sub, client, sub, ""); err != nil {
				return err
			}
			continue
		}
		for _, rg := range groups {
			if err := scope("subscription "+sub+" resource group "+rg, client, sub, rg); err != nil {
				return err
			}
		}
	}
	if err := parts.Err(); err != nil {
		return err
	}
	l.forgetCAs(listed)
	return nil
}

var _ scanner.PagedLister = (*Lister)(nil)

// withCAs adds to each cluster of a page its CA, fetching those not fetched before. Without its
// CA a cluster cannot be registered in Argo CD: it is present, not eligible, until a later scan
// fetches it.
func (l *Lister) withCAs(ctx context.Context, page []events.Cluster) {
	l.fetchCAs(ctx, page)
	for i := range page {
		c := &page[i]
		ca, ok := l.ca[c.Key]
		if ok {
			c.Attributes[AttrArgoCDCAData] = ca
		}
		c.Eligible = c.Eligible && ok
	}
}

func lower(in []string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = strings.ToLower(s)
	}
	return out
}

// clientOptions are the azcore options of the ARM clients and of the credentials: the cloud
// (ARM endpoint and audience), retries, transport and the call counter.
func (l *Lister) clientOptions() azcore.ClientOptions {
	o := azcore.ClientOptions{
		Retry: policy.RetryOptions{
			MaxRetries: int32(l.opts.MaxRetries), RetryDelay: l.opts.RetryDelay, MaxRetryDelay: l.opts.MaxRetryDelay,
		},
		Transport:        l.opts.HTTPClient,
		PerRetryPolicies: []policy.Policy{countPolicy{l.opts.Calls}},
		Telemetry:        policy.TelemetryOptions{ApplicationID: "enforcement-source-scanner"},
	}
	o.Cloud = cloud.AzurePublic
	if l.opts.Endpoint != "" {
		o.Cloud = cloud.Configuration{Services: map[cloud.ServiceName]cloud.ServiceConfiguration{
			cloud.ResourceManager: {Endpoint: l.opts.Endpoint, Audience: l.opts.Endpoint},
		}}
	}
	return o
}

// prepare builds the credential for creds, or keeps the current one (and its cached token).
func (l *Lister) prepare(creds Credentials) error {
	fp := creds.Fingerprint()
	if l.cred != nil && fp == l.fingerprint {
		return nil
	}
	co := l.clientOptions()
	// The authority host comes from AZURE_AUTHORITY_HOST (azidentity's own variable, which the
	// workload identity webhook sets); the ARM part of the cloud configuration is not for it.
	co.Cloud = cloud.Configuration{}
	disco := !knownAuthority()
	var (
		cred azcore.TokenCredential
		err  error
	)
	if creds.ClientSecret != "" {
		cred, err = azidentity.NewClientSecretCredential(creds.TenantID, creds.ClientID, creds.ClientSecret,
			&azidentity.ClientSecretCredentialOptions{ClientOptions: co, DisableInstanceDiscovery: disco})
	} else {
		cred, err = AmbientCredential(co, disco)
	}
	if err != nil {
		// azidentity's messages describe the configuration, never the secret.
		return scanner.Degraded(events.DegradedSecretInvalid, fmt.Errorf("create the azure credential: %w", err))
	}
	l.cred, l.fingerprint, l.clients = cred, fp, map[string]*armcontainerservice.ManagedClustersClient{}
	// Another identity may see other clusters under the same ids (another tenant's view): fetch
	// their CAs again.
	l.ca = map[string]string{}
	return nil
}

// knownAuthority reports whether AZURE_AUTHORITY_HOST is unset or a public or sovereign cloud's
// Microsoft Entra host, which instance discovery knows; any other (Azure Stack Hub, tests)
// skips it, as azidentity asks for private clouds.
func knownAuthority() bool {
	host := strings.TrimSpace(os.Getenv("AZURE_AUTHORITY_HOST")) // azidentity reads it there too
	if host == "" {
		return true
	}
	for _, c := range []cloud.Configuration{cloud.AzurePublic, cloud.AzureChina, cloud.AzureGovernment} {
		if strings.EqualFold(strings.TrimSuffix(host, "/"), strings.TrimSuffix(c.ActiveDirectoryAuthorityHost, "/")) {
			return true
		}
	}
	return false
}

// AmbientCredential is the identity used without a client secret: the AZURE_* client secret or
// certificate environment, then workload identity (AZURE_FEDERATED_TOKEN_FILE, as the workload
// identity webhook sets it), then managed identity; the first one configured answers. It is
// azidentity's DefaultAzureCredential without the developer tools (Azure CLI, azd,
// PowerShell), which a server must not run.
func AmbientCredential(co azcore.ClientOptions, disableInstanceDiscovery bool) (azcore.TokenCredential, error) {
	var chain []azcore.TokenCredential
	var errs []error
	if c, err := azidentity.NewEnvironmentCredential(&azidentity.EnvironmentCredentialOptions{ClientOptions: co, DisableInstanceDiscovery: disableInstanceDiscovery}); err == nil {
		chain = append(chain, c)
	} else {
		errs = append(errs, err)
	}
	if c, err := azidentity.NewWorkloadIdentityCredential(&azidentity.WorkloadIdentityCredentialOptions{ClientOptions: co, DisableInstanceDiscovery: disableInstanceDiscovery}); err == nil {
		chain = append(chain, c)
	} else {
		errs = append(errs, err)
	}
	if c, err := azidentity.NewManagedIdentityCredential(&azidentity.ManagedIdentityCredentialOptions{ClientOptions: co}); err == nil {
		chain = append(chain, c)
	} else {
		errs = append(errs, err)
	}
	if len(chain) == 0 {
		return nil, errors.Join(errs...)
	}
	return azidentity.NewChainedTokenCredential(chain, nil)
}

// client returns the ManagedClusters client of a subscription.
func (l *Lister) client(sub string) (*armcontainerservice.ManagedClustersClient, error) {
	if c := l.clients[sub]; c != nil {
		return c, nil
	}
	c, err := armcontainerservice.NewManagedClustersClient(sub, l.cred, &arm.ClientOptions{
		ClientOptions: l.clientOptions(),
		// The scanner only reads: never register resource providers on a subscription.
		DisableRPRegistration: true,
	})
	if err != nil {
		return nil, fmt.Errorf("create the managed clusters client: %w", err)
	}
	l.clients[sub] = c
	return c, nil
}

// page is one page of either list operation.
type page struct {
	value    []*armcontainerservice.ManagedCluster
	nextLink *string
}

// listScope lists a subscription (rg "") or one resource group of it and hands each page's
// clusters to each, or returns an error and its reason. each's error stops it and is returned.
func (l *Lister) listScope(ctx context.Context, client *armcontainerservice.ManagedClustersClient, sub, rg string, each func([]events.Cluster) error) (string, error) {
	var next func(context.Context) (page, error)
	var more func() bool
	if rg == "" {
		p := client.NewListPager(nil)
		more = p.More
		next = func(ctx context.Context) (page, error) {
			r, err := p.NextPage(ctx)
			return page{r.Value, r.NextLink}, err
		}
	} else {
		p := client.NewListByResourceGroupPager(rg, nil)
		more = p.More
		next = func(ctx context.Context) (page, error) {
			r, err := p.NextPage(ctx)
			return page{r.Value, r.NextLink}, err
		}
	}
	seen := map[string]bool{}
	for n := 0; more(); n++ {
		pg, err := next(ctx)
		if err != nil {
			reason := classify(err)
			if n > 0 && reason != events.DegradedUnauthorized {
				reason = events.DegradedPartial
			}
			return reason, fmt.Errorf("page %d: %w", n+1, describe(err))
		}
		if pg.nextLink != nil && *pg.nextLink != "" {
			if seen[*pg.nextLink] {
				return events.DegradedListFailed, fmt.Errorf("page %d: the same nextLink came back twice; paging does not end", n+1)
			}
			seen[*pg.nextLink] = true
		}
		clusters := make([]events.Cluster, 0, len(pg.value))
		for i, mc := range pg.value {
			if mc == nil {
				continue
			}
			c, err := Convert(sub, mc)
			if err != nil {
				return events.DegradedListFailed, fmt.Errorf("page %d: cluster #%d: %w", n+1, i, err)
			}
			clusters = append(clusters, c)
		}
		if err := each(clusters); err != nil {
			return "", err
		}
	}
	return "", nil
}

// fetchCAs asks listClusterUserCredential for the CA of every cluster not fetched before, a
// few at a time. A failure leaves the cluster without its CA (and so not eligible) until the
// next scan tries again; it does not fail the listing, which is complete without it.
func (l *Lister) fetchCAs(ctx context.Context, clusters []events.Cluster) {
	type fetch struct {
		key, rg, name string
		client        *armcontainerservice.ManagedClustersClient
		ca            string
	}
	var todo []fetch
	for i := range clusters {
		c := &clusters[i]
		if _, ok := l.ca[c.Key]; ok {
			continue
		}
		client, err := l.client(attr(c, "subscriptionId"))
		if err != nil {
			continue
		}
		todo = append(todo, fetch{key: c.Key, rg: attr(c, "resourceGroup"), name: attr(c, "azureName"), client: client})
	}
	scanner.Parallel(len(todo), l.opts.CAFetchConcurrency, func(i int) {
		// A failure is counted by the call counter and retried at the next scan.
		todo[i].ca, _ = fetchCA(ctx, todo[i].client, todo[i].rg, todo[i].name)
	})
	for _, f := range todo {
		if f.ca != "" {
			l.ca[f.key] = f.ca
		}
	}
}

// forgetCAs drops the CAs of clusters no longer listed (the listing is complete), so that a
// cluster deleted and created again under the same id gets its new CA.
func (l *Lister) forgetCAs(listed map[string]bool) {
	for k := range l.ca {
		if !listed[k] {
			delete(l.ca, k)
		}
	}
}

func attr(c *events.Cluster, k string) string {
	s, _ := c.Attributes[k].(string)
	return s
}

// fetchCA reads the cluster CA from the user kubeconfig ARM returns: base64 of its PEM.
func fetchCA(ctx context.Context, client *armcontainerservice.ManagedClustersClient, rg, name string) (string, error) {
	resp, err := client.ListClusterUserCredentials(ctx, rg, name, nil)
	if err != nil {
		return "", err
	}
	for _, kc := range resp.Kubeconfigs {
		if kc == nil || len(kc.Value) == 0 {
			continue
		}
		cfg, err := clientcmd.Load(kc.Value)
		if err != nil {
			return "", fmt.Errorf("kubeconfig of %s: %w", name, err)
		}
		for _, cl := range cfg.Clusters {
			if len(cl.CertificateAuthorityData) > 0 {
				return base64.StdEncoding.EncodeToString(cl.CertificateAuthorityData), nil
			}
		}
	}
	return "", fmt.Errorf("kubeconfig of %s has no certificate-authority-data", name)
}

// countPolicy counts every attempt (it runs once per try, after the retry policy).
type countPolicy struct{ calls *prometheus.CounterVec }

func (p countPolicy) Do(req *policy.Request) (*http.Response, error) {
	resp, err := req.Next()
	if p.calls == nil {
		return resp, err
	}
	outcome := "success"
	switch {
	case err != nil:
		outcome = "error"
	case resp.StatusCode == http.StatusTooManyRequests:
		outcome = "throttled"
	case resp.StatusCode >= 300:
		outcome = "error"
	}
	p.calls.WithLabelValues(operation(req.Raw().URL), outcome).Inc()
	return resp, err
}

// operation names a request by its path.
func operation(u *url.URL) string {
	p := u.Path
	switch {
	case strings.HasSuffix(p, "/listClusterUserCredential"):
		return "ListClusterUserCredentials"
	case strings.HasSuffix(p, "/oauth2/v2.0/token"), strings.HasSuffix(p, "/token"):
		return "Token"
	case strings.Contains(strings.ToLower(p), "/resourcegroups/"):
		return "ListByResourceGroup"
	case strings.HasSuffix(p, "/managedClusters"):
		return "List"
	}
	return "Other"
}

// classify maps an error to a degraded reason: Unauthorized for 401/403 answers and refused or
// unavailable credentials, ListFailed otherwise.
func classify(err error) string {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		if re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden {
			return events.DegradedUnauthorized
		}
		return events.DegradedListFailed
	}
	var afe *azidentity.AuthenticationFailedError
	if errors.As(err, &afe) {
		return events.DegradedUnauthorized
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return events.DegradedListFailed
	}
	// azidentity's "credential unavailable" (no ambient identity configured) has no exported
	// type; its message names the credential.
	if strings.Contains(err.Error(), "Credential") && strings.Contains(err.Error(), "unavailable") {
		return events.DegradedUnauthorized
	}
	return events.DegradedListFailed
}

// describe shortens ARM errors to status, code and message: azcore's own text includes the
// whole response, headers and all.
func describe(err error) error {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		if re.RawResponse == nil {
			return fmt.Errorf("%d %s", re.StatusCode, re.ErrorCode)
		}
		return fmt.Errorf("%s %d %s%s", re.RawResponse.Request.Method, re.StatusCode, re.ErrorCode, armMessage(re.RawResponse))
	}
	return err
}

// armMessage reads error.message of an ARM error body (azcore keeps the body readable).
func armMessage(resp *http.Response) string {
	if resp.Body == nil {
		return ""
	}
	var body struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Error.Message == "" {
		return ""
	}
	return ": " + body.Error.Message
}

// Convert turns a listed managed cluster into the scanner's cluster. Key is its ARM id in lower
// case (ARM compares ids without case and does not always spell them alike); Name is
// events.ObjectName of the AKS name (which may hold upper case and underscores); URL is
// https://<fqdn> (the private FQDN for a private cluster without a public one; "" while it has
// none); Labels are its tags; State and Eligible as State and Eligible say. Attributes are the
// object as ARM returns it (JSON names) minus VolatileFields under properties, plus: name,
// azureName (the AKS name), url, id (the ARM id), subscriptionId, resourceGroup, location,
// tags (always a map), kubernetesVersion (the current one), provisioningState, powerState, and
// the Argo CD keys but the CA (the Lister adds it).
func Convert(sub string, mc *armcontainerservice.ManagedCluster) (events.Cluster, error) {
	if mc.ID == nil || mc.Name == nil || *mc.Name == "" {
		return events.Cluster{}, errors.New("the cluster has no id or name")
	}
	rid, err := arm.ParseResourceID(*mc.ID)
	if err != nil {
		return events.Cluster{}, fmt.Errorf("cluster id: %w", err)
	}
	raw, err := json.Marshal(mc)
	if err != nil {
		return events.Cluster{}, fmt.Errorf("encode cluster: %w", err)
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return events.Cluster{}, fmt.Errorf("decode cluster: %w", err)
	}
	var provisioning, power, fqdn, version string
	if p := mc.Properties; p != nil {
		provisioning, fqdn = deref(p.ProvisioningState), deref(p.Fqdn)
		if fqdn == "" {
			fqdn = deref(p.PrivateFQDN)
		}
		if p.PowerState != nil && p.PowerState.Code != nil {
			power = string(*p.PowerState.Code)
		}
		version = deref(p.CurrentKubernetesVersion)
		if version == "" {
			version = deref(p.KubernetesVersion)
		}
	}
	if props, ok := obj["properties"].(map[string]any); ok {
		for _, f := range VolatileFields {
			delete(props, f)
		}
	}
	url := ""
	if fqdn != "" {
		url = "https://" + fqdn
	}
	labels := make(map[string]string, len(mc.Tags))
	tagsAttr := make(map[string]any, len(mc.Tags))
	for k, v := range mc.Tags {
		labels[k] = deref(v)
		tagsAttr[k] = deref(v)
	}
	name := events.ObjectName(*mc.Name)
	obj["name"] = name
	obj["azureName"] = *mc.Name
	obj["url"] = url
	obj["id"] = *mc.ID
	obj["subscriptionId"] = strings.ToLower(rid.SubscriptionID)
	obj["resourceGroup"] = rid.ResourceGroupName
	obj["location"] = deref(mc.Location)
	obj["tags"] = tagsAttr
	obj["kubernetesVersion"] = version
	obj["provisioningState"] = provisioning
	obj["powerState"] = power
	obj[AttrArgoCDExecCommand] = "argocd-k8s-auth"
	obj[AttrArgoCDExecArgs] = []any{"azure"}
	obj[AttrArgoCDExecEnv] = map[string]any{"AAD_LOGIN_METHOD": "workloadidentity"}
	obj[AttrArgoCDExecAPIVersion] = "client.authentication.k8s.io/v1beta1"
	return events.Cluster{
		Key:        strings.ToLower(*mc.ID),
		Name:       name,
		URL:        url,
		Labels:     labels,
		State:      State(provisioning, power),
		Eligible:   Eligible(provisioning, power),
		Attributes: obj,
	}, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
