package aks

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv/aksfake"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
)

const (
	subA = "aaaaaaaa-0000-0000-0000-000000000001"
	subB = "bbbbbbbb-0000-0000-0000-000000000002"
)

// secretCreds are the fake's service principal.
var secretCreds = Credentials{TenantID: aksfake.TenantID, ClientID: aksfake.ClientID, ClientSecret: aksfake.ClientSecret}

// newTestLister points a Lister at the fake: ARM endpoint, authority host (azidentity's
// AZURE_AUTHORITY_HOST) and a client that trusts the fake's certificate; short retry delays.
func newTestLister(t testing.TB, f *aksfake.Server, o Options, creds Credentials) (*Lister, *prometheus.CounterVec) {
	t.Helper()
	t.Setenv("AZURE_AUTHORITY_HOST", f.URL)
	calls := NewCallsCounter(prometheus.NewRegistry())
	o.Endpoint, o.HTTPClient, o.Calls = f.URL, f.Client(), calls
	o.RetryDelay, o.MaxRetryDelay = 5*time.Millisecond, 2*time.Second
	o.Credentials = func(context.Context) (Credentials, error) { return creds, nil }
	return NewLister(o), calls
}

func byName(cs []events.Cluster) map[string]events.Cluster {
	m := map[string]events.Cluster{}
	for _, c := range cs {
		m[c.Name] = c
	}
	return m
}

// TestListPagesConvertsAndFetchesCAsOnce: two subscriptions through the real client with a
// client secret, three pages of two in the first; ids lower-cased, names normalised, stopped
// clusters present and not eligible, secrets of the ARM object left out; each cluster's CA is
// fetched once, at its first listing, and not at the next scans.
func TestListPagesConvertsAndFetchesCAsOnce(t *testing.T) {
	f := aksfake.New(t)
	for i := range 5 {
		f.Add(subA, "RG-Prod", fmt.Sprintf("prod-%d", i), "Succeeded", "Running", map[string]string{"env": "prod"})
	}
	f.Add(subB, "rg-lab", "Lab_Cluster", "Succeeded", "Stopped", nil)
	f.Add(subB, "rg-lab", "new-one", "Creating", "Running", nil)
	l, calls := newTestLister(t, f, Options{Subscriptions: []string{strings.ToUpper(subB), subA, subA}}, secretCreds)

	cs, err := l.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := byName(cs)
	if len(cs) != 7 || f.Lists[subA] != 3 || f.Lists[subB] != 1 {
		t.Fatalf("listed %d clusters, list calls %v; want 7 clusters, 3 pages of %s and 1 of %s", len(cs), f.Lists, subA, subB)
	}
	p0 := got["prod-0"]
	wantKey := "/subscriptions/" + subA + "/resourcegroups/rg-prod/providers/microsoft.containerservice/managedclusters/prod-0"
	if p0.Key != wantKey || !p0.Eligible || p0.State != "Running" || p0.Labels["env"] != "prod" || !strings.HasPrefix(p0.URL, "https://prod-0-dns-") {
		t.Errorf("prod-0 = %+v", p0)
	}
	ca, _ := p0.Attributes[AttrArgoCDCAData].(string)
	if pem, _ := base64.StdEncoding.DecodeString(ca); string(pem) != string(aksfake.ClusterCAPEM("prod-0")) {
		t.Errorf("prod-0 CA = %q", ca)
	}
	if p0.Attributes["resourceGroup"] != "RG-Prod" && p0.Attributes["resourceGroup"] != "rg-prod" || p0.Attributes["subscriptionId"] != subA ||
		p0.Attributes["kubernetesVersion"] != "1.30.5" || p0.Attributes["azureName"] != "prod-0" {
		t.Errorf("prod-0 attributes = %v", p0.Attributes)
	}
	lab, ok := got[events.ObjectName("Lab_Cluster")]
	if !ok || lab.Name == "Lab_Cluster" || lab.Eligible || lab.State != "Stopped" {
		t.Errorf("stopped Lab_Cluster = %+v (present: %v), want present, normalised, Stopped, not eligible", lab, ok)
	}
	if c := got["new-one"]; c.Eligible || c.State != "Creating" {
		t.Errorf("creating cluster = %+v, want not eligible", c)
	}
	for _, c := range cs {
		s := fmt.Sprint(c.Attributes)
		if strings.Contains(s, "legacy-sp-secret") || strings.Contains(s, "legacy-windows-password") || strings.Contains(s, "nodepool1") {
			t.Errorf("%s attributes hold a secret or a volatile field: %s", c.Name, s)
		}
	}
	if f.Creds["prod-0"] != 1 {
		t.Errorf("CA of prod-0 fetched %d times, want 1", f.Creds["prod-0"])
	}

	for range 2 {
		if _, err := l.List(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"prod-0", "prod-4", "Lab_Cluster"} {
		if f.Creds[n] != 1 {
			t.Errorf("CA of %s fetched %d times after three scans, want 1 (first sight only)", n, f.Creds[n])
		}
	}
	if f.Issued != 1 {
		t.Errorf("token issued %d times, want 1 (cached between scans)", f.Issued)
	}
	if n := testutil.ToFloat64(calls.WithLabelValues("ListClusterUserCredentials", "success")); n != 7 {
		t.Errorf("ListClusterUserCredentials calls = %v, want 7", n)
	}
	if n := testutil.ToFloat64(calls.WithLabelValues("Token", "success")); n != 1 {
		t.Errorf("Token calls = %v, want 1", n)
	}
	if n := testutil.ToFloat64(calls.WithLabelValues("List", "success")); n != 12 {
		t.Errorf("List calls = %v, want 12 (4 pages × 3 scans)", n)
	}
}

// TestListByResourceGroup: with resource groups, only those groups are listed, in any case.
func TestListByResourceGroup(t *testing.T) {
	f := aksfake.New(t)
	f.Add(subA, "rg-prod", "a", "Succeeded", "Running", nil)
	f.Add(subA, "rg-other", "b", "Succeeded", "Running", nil)
	l, _ := newTestLister(t, f, Options{Subscriptions: []string{subA}, ResourceGroups: []string{"RG-Prod"}}, secretCreds)
	cs, err := l.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].Name != "a" || f.Lists[subA] != 0 || f.Lists[subA+"/rg-prod"] != 1 {
		t.Fatalf("clusters %v, lists %v; want only a, through ListByResourceGroup", byName(cs), f.Lists)
	}
}

// TestCAFetchFailureKeepsTheClusterNotEligible: a cluster whose kubeconfig cannot be had is
// listed (the listing is complete) but not eligible, and its CA is asked again at the next scan.
func TestCAFetchFailureKeepsTheClusterNotEligible(t *testing.T) {
	f := aksfake.New(t)
	f.Add(subA, "rg", "a", "Succeeded", "Running", nil)
	f.Add(subA, "rg", "b", "Succeeded", "Running", nil)
	f.Configure(func(f *aksfake.Server) {
		f.CredFail["b"] = aksfake.Error{Status: 403, Code: "AuthorizationFailed", Msg: "does not have authorization to perform action 'Microsoft.ContainerService/managedClusters/listClusterUserCredential/action'"}
	})
	l, _ := newTestLister(t, f, Options{Subscriptions: []string{subA}}, secretCreds)
	cs, err := l.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := byName(cs)
	if !got["a"].Eligible || got["b"].Eligible || got["b"].Attributes[AttrArgoCDCAData] != nil {
		t.Fatalf("a eligible %v, b eligible %v (CA %v); want b present without CA, not eligible", got["a"].Eligible, got["b"].Eligible, got["b"].Attributes[AttrArgoCDCAData])
	}
	f.Configure(func(f *aksfake.Server) { delete(f.CredFail, "b") })
	cs, err = l.List(context.Background())
	if err != nil || !byName(cs)["b"].Eligible || f.Creds["b"] != 2 || f.Creds["a"] != 1 {
		t.Fatalf("after the fix: b = %+v, creds %v, %v", byName(cs)["b"], f.Creds, err)
	}
}

// TestListErrors: every failure of the cloud API is a degraded listing with a reason the
// user can act on, and a message that names the scope and never the client secret.
func TestListErrors(t *testing.T) {
	tests := []struct {
		name       string
		subs       []string
		creds      Credentials
		apply      func(f *aksfake.Server)
		wantReason string
		wantMsg    string
	}{
		{name: "revoked token (401)", apply: func(f *aksfake.Server) { f.RejectTokens = true },
			wantReason: events.DegradedUnauthorized, wantMsg: "401 InvalidAuthenticationToken"},
		{name: "no role on the subscription (403)", apply: func(f *aksfake.Server) {
			f.Fail[subA] = aksfake.Error{Status: 403, Code: "AuthorizationFailed", Msg: "The client does not have authorization to perform action 'Microsoft.ContainerService/managedClusters/read'"}
		}, wantReason: events.DegradedUnauthorized, wantMsg: "403 AuthorizationFailed: The client does not have authorization"},
		{name: "wrong client secret", creds: Credentials{TenantID: aksfake.TenantID, ClientID: aksfake.ClientID, ClientSecret: "wrong-secret-value"},
			wantReason: events.DegradedUnauthorized, wantMsg: "AADSTS7000215"},
		{name: "throttled, Retry-After beyond the retry cap", apply: func(f *aksfake.Server) { f.Throttle[subA] = aksfake.Throttle{N: 1, RetryAfter: 60} },
			wantReason: events.DegradedListFailed, wantMsg: "429 TooManyRequests"},
		{name: "malformed body", apply: func(f *aksfake.Server) { f.Malformed[subA] = true },
			wantReason: events.DegradedListFailed, wantMsg: "subscription " + subA},
		{name: "a later page fails", apply: func(f *aksfake.Server) {
			f.FailPage[subA] = aksfake.PageError{Page: 1, Error: aksfake.Error{Status: 400, Code: "InvalidSkipToken", Msg: "bad token"}}
		}, wantReason: events.DegradedPartial, wantMsg: "page 2: GET 400 InvalidSkipToken"},
		{name: "nextLink loops", apply: func(f *aksfake.Server) { f.LoopNextLink[subA] = true },
			wantReason: events.DegradedListFailed, wantMsg: "the same nextLink came back twice"},
		{name: "one subscription of two fails", subs: []string{subA, subB}, apply: func(f *aksfake.Server) {
			f.Fail[subB] = aksfake.Error{Status: 404, Code: "SubscriptionNotFound", Msg: "The subscription could not be found."}
		}, wantReason: events.DegradedPartial, wantMsg: "subscription " + subB + ": page 1: GET 404 SubscriptionNotFound"},
		{name: "5xx beyond the retries", apply: func(f *aksfake.Server) {
			f.Fail[subA] = aksfake.Error{Status: 503, Code: "ServiceUnavailable", Msg: "try later"}
		}, wantReason: events.DegradedListFailed, wantMsg: "503 ServiceUnavailable"},
		{name: "no subscription", subs: []string{}, wantReason: events.DegradedInvalidSpec, wantMsg: "aks.subscriptions is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := aksfake.New(t)
			for i := range 3 {
				f.Add(subA, "rg", fmt.Sprintf("c%d", i), "Succeeded", "Running", nil)
			}
			f.Add(subB, "rg", "d", "Succeeded", "Running", nil)
			if tt.apply != nil {
				f.Configure(tt.apply)
			}
			subs, creds := tt.subs, tt.creds
			if subs == nil {
				subs = []string{subA}
			}
			if creds.ClientSecret == "" {
				creds = secretCreds
			}
			l, _ := newTestLister(t, f, Options{Subscriptions: subs}, creds)
			cs, err := l.List(context.Background())
			if got := scanner.ReasonOf(err); err == nil || got != tt.wantReason || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("List = %d clusters, %v (reason %s); want reason %s, message with %q", len(cs), err, got, tt.wantReason, tt.wantMsg)
			}
			if strings.Contains(err.Error(), creds.ClientSecret) || strings.Contains(err.Error(), aksfake.ClientSecret) {
				t.Fatalf("error shows the client secret: %v", err)
			}
			var de *scanner.DegradedError
			if !errors.As(err, &de) {
				t.Fatalf("error is not a DegradedError: %v", err)
			}
			t.Logf("%s: %v", tt.name, err)
		})
	}
}

// TestThrottlingIsRetriedAfterRetryAfter: 429 with a Retry-After within the cap is waited for
// and retried by azcore's retry policy; the listing then succeeds and the throttled attempts
// are counted.
func TestThrottlingIsRetriedAfterRetryAfter(t *testing.T) {
	f := aksfake.New(t)
	f.Add(subA, "rg", "a", "Succeeded", "Running", nil)
	f.Configure(func(f *aksfake.Server) { f.Throttle[subA] = aksfake.Throttle{N: 2, RetryAfter: 1} })
	l, calls := newTestLister(t, f, Options{Subscriptions: []string{subA}}, secretCreds)
	start := time.Now()
	cs, err := l.List(context.Background())
	if err != nil || len(cs) != 1 {
		t.Fatalf("List = %v, %v", cs, err)
	}
	if d := time.Since(start); d < 2*time.Second {
		t.Errorf("listing took %v; Retry-After: 1 twice was not honoured", d)
	}
	if n := testutil.ToFloat64(calls.WithLabelValues("List", "throttled")); n != 2 {
		t.Errorf("throttled List calls = %v, want 2", n)
	}
}

// TestAmbientWorkloadIdentity: with no client secret the Lister uses the ambient identity; with
// the workload identity variables (as the webhook injects them) the federated token is exchanged
// at the authority host for the ARM token. A Secret's subscription_id is the default
// subscription.
func TestAmbientWorkloadIdentity(t *testing.T) {
	f := aksfake.New(t)
	f.Add(subA, "rg", "a", "Succeeded", "Running", nil)
	tokenFile := filepath.Join(t.TempDir(), "azure-identity-token")
	if err := os.WriteFile(tokenFile, []byte(aksfake.FederatedToken), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AZURE_CLIENT_ID", aksfake.ClientID)
	t.Setenv("AZURE_TENANT_ID", aksfake.TenantID)
	t.Setenv("AZURE_FEDERATED_TOKEN_FILE", tokenFile)
	l, _ := newTestLister(t, f, Options{}, Credentials{SubscriptionID: subA})
	cs, err := l.List(context.Background())
	if err != nil || len(cs) != 1 || f.Issued != 1 {
		t.Fatalf("List = %v, %v; tokens issued %d", cs, err, f.Issued)
	}
}

// TestCredentialsChangeRebuildsTheClient: a fixed Secret takes effect at the next scan.
func TestCredentialsChangeRebuildsTheClient(t *testing.T) {
	f := aksfake.New(t)
	f.Add(subA, "rg", "a", "Succeeded", "Running", nil)
	creds := Credentials{TenantID: aksfake.TenantID, ClientID: aksfake.ClientID, ClientSecret: "old-wrong-secret"}
	l, _ := newTestLister(t, f, Options{Subscriptions: []string{subA}}, creds)
	l.opts.Credentials = func(context.Context) (Credentials, error) { return creds, nil }
	if _, err := l.List(context.Background()); scanner.ReasonOf(err) != events.DegradedUnauthorized {
		t.Fatalf("wrong secret: %v", err)
	}
	creds = secretCreds
	if cs, err := l.List(context.Background()); err != nil || len(cs) != 1 {
		t.Fatalf("fixed secret: %v, %v", cs, err)
	}
}

func TestStateAndEligible(t *testing.T) {
	for _, tt := range []struct {
		prov, power, state string
		eligible           bool
	}{
		{"Succeeded", "Running", "Running", true},
		{"Succeeded", "Stopped", "Stopped", false},
		{"Upgrading", "Running", "Upgrading", true},
		{"Updating", "Running", "Updating", true},
		{"Creating", "Running", "Creating", false},
		{"Stopping", "Running", "Stopping", false},
		{"Starting", "Stopped", "Starting", false},
		{"Failed", "Running", "Failed", false},
		{"Deleting", "Running", "Deleting", false},
	} {
		if s, e := State(tt.prov, tt.power), Eligible(tt.prov, tt.power); s != tt.state || e != tt.eligible {
			t.Errorf("%s/%s: state %s eligible %v, want %s %v", tt.prov, tt.power, s, e, tt.state, tt.eligible)
		}
	}
}

// TestRequestsPerScan counts the Azure calls of scans of 1,000 clusters in two subscriptions
// (600 and 400) with ARM pages of 100: a first scan costs ceil(n_subscription / 100) list pages
// per subscription, one ListClusterUserCredentials per cluster (its CA) and one token; a rescan
// only the pages, and a cluster new since one credentials call more.
func TestRequestsPerScan(t *testing.T) {
	f := aksfake.New(t)
	f.Configure(func(f *aksfake.Server) { f.PageSize = 100 })
	for i := range 1000 {
		sub := subA
		if i%5 >= 3 {
			sub = subB
		}
		f.Add(sub, "rg-fleet", fmt.Sprintf("fleet-%04d", i), "Succeeded", "Running", nil)
	}
	l, calls := newTestLister(t, f, Options{Subscriptions: []string{subA, subB}}, secretCreds)
	var lists, creds, tokens int // totals so far
	scan := func(what string, wantClusters, wantLists, wantCreds, wantTokens int) {
		t.Helper()
		cs, err := l.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) != wantClusters {
			t.Fatalf("%s: listed %d clusters, want %d", what, len(cs), wantClusters)
		}
		lists, creds, tokens = lists+wantLists, creds+wantCreds, tokens+wantTokens
		f.Configure(func(f *aksfake.Server) {
			got := 0
			for _, n := range f.Creds {
				got += n
			}
			if f.Lists[subA]+f.Lists[subB] != lists || got != creds || f.Issued != tokens {
				t.Errorf("%s: %d list pages %v, %d credentials calls, %d tokens in all; want %d, %d, %d",
					what, f.Lists[subA]+f.Lists[subB], f.Lists, got, f.Issued, lists, creds, tokens)
			}
		})
		for op, want := range map[string]int{"List": lists, "ListClusterUserCredentials": creds, "Token": tokens} {
			if got := testutil.ToFloat64(calls.WithLabelValues(op, "success")); got != float64(want) {
				t.Errorf("%s: counted %s = %v, want %d", what, op, got, want)
			}
		}
	}
	scan("first scan", 1000, 6+4, 1000, 1)
	scan("rescan", 1000, 6+4, 0, 0)
	f.Add(subB, "rg-fleet", "fleet-new", "Succeeded", "Running", nil)
	scan("rescan with a new cluster", 1001, 6+5, 1, 0)
}

// TestListPagesHandsOverEachPage: ListPages hands the scanner each ARM page with its clusters'
// CAs; an error of the scanner's stops the listing; after a subscription fails, the
// subscriptions after it are still listed, but none of their pages is handed over.
func TestListPagesHandsOverEachPage(t *testing.T) {
	f := aksfake.New(t)
	for i := range 5 {
		f.Add(subA, "rg-prod", fmt.Sprintf("prod-%d", i), "Succeeded", "Running", nil)
	}
	f.Add(subB, "rg-lab", "lab", "Succeeded", "Running", nil)
	l, _ := newTestLister(t, f, Options{Subscriptions: []string{subB, subA}}, secretCreds)
	ctx := context.Background()

	var sizes []int
	record := func(page []events.Cluster) error {
		for _, c := range page {
			if c.Attributes[AttrArgoCDCAData] == nil || !c.Eligible {
				t.Errorf("cluster %s handed over without its CA: %+v", c.Name, c)
			}
		}
		sizes = append(sizes, len(page))
		return nil
	}
	if err := l.ListPages(ctx, record); err != nil {
		t.Fatal(err)
	}
	if want := []int{2, 2, 1, 1}; fmt.Sprint(sizes) != fmt.Sprint(want) {
		t.Errorf("pages handed over = %v, want %v (%s's three, then %s's)", sizes, want, subA, subB)
	}

	listsA := f.Lists[subA]
	stop := errors.New("inventory bucket unavailable")
	handed := 0
	err := l.ListPages(ctx, func([]events.Cluster) error {
		if handed++; handed == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || handed != 2 {
		t.Errorf("ListPages = %v after %d pages, want the scanner's error after 2", err, handed)
	}
	if got := f.Lists[subA] - listsA; got != 2 {
		t.Errorf("list requests after the scanner stopped the listing = %d, want 2", got)
	}

	f.Configure(func(f *aksfake.Server) {
		f.Fail[subA] = aksfake.Error{Status: 503, Code: "ServiceUnavailable", Msg: "try later"}
	})
	f.Add(subB, "rg-lab", "lab-2", "Succeeded", "Running", nil)
	sizes = nil
	listsB := f.Lists[subB]
	err = l.ListPages(ctx, record)
	if scanner.ReasonOf(err) != events.DegradedPartial || !strings.Contains(err.Error(), "subscription "+subA) {
		t.Errorf("ListPages = %v, want PartialListing naming subscription %s", err, subA)
	}
	if len(sizes) != 0 {
		t.Errorf("pages handed over after %s failed: %v, want none", subA, sizes)
	}
	if f.Lists[subB] == listsB {
		t.Errorf("%s was not listed after %s failed; the error would not name it if it failed too", subB, subA)
	}
	if f.Creds["lab-2"] != 0 {
		t.Errorf("CA of lab-2 fetched %d times for a listing that failed, want 0", f.Creds["lab-2"])
	}
}
