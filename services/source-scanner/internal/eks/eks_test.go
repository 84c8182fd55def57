package eks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/eks/eksfake"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner/scannertest"
)

const testSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

// newTestLister returns a Lister pointed at f, with static credentials, fast retries and a
// call counter.
func newTestLister(f *eksfake.Server, regions []string, mod func(*Options)) (*Lister, *prometheus.CounterVec, *scannertest.Clock) {
	clk := scannertest.NewClock()
	calls := NewCallsCounter(prometheus.NewRegistry())
	opts := Options{
		Regions: regions,
		Credentials: func(context.Context) (Credentials, error) {
			return Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: testSecret}, nil
		},
		Endpoint:           f.URL,
		STSEndpoint:        f.URL,
		Calls:              calls,
		MaxAttempts:        3,
		MaxBackoff:         5 * time.Millisecond,
		RetryMode:          aws.RetryModeStandard,
		RedescribeInterval: 10 * time.Minute,
		Now:                clk.Now,
	}
	if mod != nil {
		mod(&opts)
	}
	return NewLister(opts), calls, clk
}

func TestEligible(t *testing.T) {
	for status, want := range map[string]bool{
		"ACTIVE": true, "UPDATING": true, "CREATING": false, "DELETING": false, "FAILED": false, "PENDING": false, "": false,
	} {
		if got := Eligible(status); got != want {
			t.Errorf("Eligible(%q) = %t, want %t", status, got, want)
		}
	}
}

// TestListPagingAndShape lists two regions, one with three pages, through the real SDK client,
// and checks the clusters' shape.
func TestListPagingAndShape(t *testing.T) {
	f := eksfake.New(t)
	for i := range 250 {
		f.Add("eu-west-1", fmt.Sprintf("c%03d", i), "ACTIVE", map[string]string{"team": "a"})
	}
	f.Add("us-east-1", "Prod_Cluster.1", "UPDATING", map[string]string{"env": "prod", "team": "b"})
	f.Add("us-east-1", "creating", "CREATING", nil)
	l, calls, _ := newTestLister(f, []string{"us-east-1", "eu-west-1"}, nil)

	clusters := scannertest.ListOK(t, l)
	if len(clusters) != 252 {
		t.Fatalf("listed %d clusters, want 252", len(clusters))
	}
	if got := f.Count("ListClusters"); got != 3+1 {
		t.Errorf("ListClusters calls = %d, want 4 (3 pages + 1)", got)
	}
	if got := f.Count("DescribeCluster"); got != 252 {
		t.Errorf("DescribeCluster calls = %d, want 252", got)
	}
	if got := testutil.ToFloat64(calls.WithLabelValues("ListClusters", "success")); got != 4 {
		t.Errorf("counted ListClusters successes = %v, want 4", got)
	}
	if got := testutil.ToFloat64(calls.WithLabelValues("DescribeCluster", "success")); got != 252 {
		t.Errorf("counted DescribeCluster successes = %v, want 252", got)
	}

	byKey := map[string]events.Cluster{}
	for _, c := range clusters {
		byKey[c.Key] = c
	}
	prod, ok := byKey["arn:aws:eks:us-east-1:111122223333:cluster/Prod_Cluster.1"]
	if !ok {
		t.Fatalf("Prod_Cluster.1 missing from %d clusters", len(clusters))
	}
	// Normalised with a 64-bit suffix; the name earlier versions gave it, to the digit, is
	// LegacyName (the scanner keeps it for a cluster the inventory knows under it).
	if want := "prod-cluster-1-e227441d411d81eb"; prod.Name != want || prod.Name != events.ObjectName("Prod_Cluster.1") {
		t.Errorf("Name = %q, want the normalised name %s", prod.Name, want)
	}
	if got := LegacyName(prod); got != "prod-cluster-1-e227441d" {
		t.Errorf("LegacyName = %q, want prod-cluster-1-e227441d", got)
	}
	if prod.URL != "https://PROD_CLUSTER.1.gr7.us-east-1.eks.amazonaws.com" || prod.State != "UPDATING" || !prod.Eligible {
		t.Errorf("URL, State, Eligible = %q, %q, %t", prod.URL, prod.State, prod.Eligible)
	}
	if prod.Labels["env"] != "prod" || prod.Labels["team"] != "b" || len(prod.Labels) != 2 {
		t.Errorf("Labels = %v, want the tags", prod.Labels)
	}
	a := prod.Attributes
	want := map[string]any{
		"name": prod.Name, "url": prod.URL, "id": prod.Key, "arn": prod.Key, "region": "us-east-1",
		"version": "1.30", "status": "UPDATING", "platformVersion": "eks.5", "createdAt": "2023-11-14T22:13:20Z",
		"roleArn":             "arn:aws:iam::111122223333:role/eks-cluster",
		AttrArgoCDClusterName: "Prod_Cluster.1",
		"endpoint":            prod.URL,
	}
	for k, v := range want {
		if a[k] != v {
			t.Errorf("attribute %s = %#v, want %#v", k, a[k], v)
		}
	}
	if tags, _ := a["tags"].(map[string]any); tags["env"] != "prod" {
		t.Errorf("attribute tags = %#v", a["tags"])
	}
	if vpc, _ := a["resourcesVpcConfig"].(map[string]any); vpc["vpcId"] != "vpc-1" || vpc["endpointPublicAccess"] != true {
		t.Errorf("attribute resourcesVpcConfig = %#v", a["resourcesVpcConfig"])
	}
	if id, _ := a["identity"].(map[string]any); id == nil || id["oidc"].(map[string]any)["issuer"] == nil {
		t.Errorf("attribute identity = %#v", a["identity"])
	}
	if ca, _ := a[AttrArgoCDCAData].(string); !strings.HasPrefix(ca, "LS0tLS1CRUdJTi") {
		t.Errorf("attribute %s = %q, want the base64 PEM", AttrArgoCDCAData, ca)
	}
	if vpc, _ := a["resourcesVpcConfig"].(map[string]any); vpc != nil {
		if _, ok := vpc["controlPlaneEgressMode"]; ok {
			t.Errorf("an enum the API did not send is an attribute: %#v", vpc)
		}
	}
	for _, k := range []string{"certificateAuthority", "clientRequestToken", AttrArgoCDRoleARN} {
		if _, ok := a[k]; ok {
			t.Errorf("attribute %s should not be set", k)
		}
	}
	creating := byKey["arn:aws:eks:us-east-1:111122223333:cluster/creating"]
	if creating.Name != "creating" || creating.Eligible || creating.State != "CREATING" {
		t.Errorf("creating cluster = %+v", creating)
	}
}

// TestSteadyStateDescribes counts DescribeCluster calls: none for unchanged ACTIVE clusters
// inside the re-describe interval, one per scan for a cluster in a transitional status, all
// again once the interval has passed.
func TestSteadyStateDescribes(t *testing.T) {
	f := eksfake.New(t)
	const n = 20
	for i := range n {
		f.Add("eu-west-1", fmt.Sprintf("c%02d", i), "ACTIVE", map[string]string{"env": "prod"})
	}
	f.Add("eu-west-1", "new", "CREATING", nil)
	f.Add("eu-west-1", "broken", "FAILED", nil) // terminal: follows the slow interval
	l, _, clk := newTestLister(f, []string{"eu-west-1"}, nil)

	scan := func(wantDescribes int) []events.Cluster {
		t.Helper()
		f.ResetCounts()
		clusters := scannertest.ListOK(t, l)
		if got := f.Count("DescribeCluster"); got != wantDescribes {
			t.Fatalf("DescribeCluster calls = %d, want %d", got, wantDescribes)
		}
		if got := f.Count("ListClusters"); got != 1 {
			t.Fatalf("ListClusters calls = %d, want 1", got)
		}
		return clusters
	}
	scan(n + 2)
	for range 5 {
		clk.Add(time.Minute)
		scan(1) // only the CREATING cluster
	}
	f.Set("eu-west-1", "new", "status", "ACTIVE")
	clk.Add(time.Minute)
	if c := find(scan(1), "new"); c == nil || !c.Eligible {
		t.Fatalf("new cluster after it became ACTIVE: %+v", c)
	}
	clk.Add(time.Minute)
	scan(0)

	// A tag change is invisible until the interval passes, then seen.
	f.Set("eu-west-1", "c00", "tags", map[string]any{"env": "staging"})
	clk.Add(time.Minute)
	if c := find(scan(0), "c00"); c.Labels["env"] != "prod" {
		t.Fatalf("c00 labels changed before re-describe: %v", c.Labels)
	}
	clk.Add(10 * time.Minute)
	if c := find(scan(n+2), "c00"); c.Labels["env"] != "staging" {
		t.Fatalf("c00 labels after re-describe = %v", c.Labels)
	}

	// A new name is described at once; a removed one is no longer listed.
	f.Add("eu-west-1", "later", "ACTIVE", nil)
	f.Remove("eu-west-1", "c01")
	clk.Add(time.Minute)
	clusters := scan(1)
	if find(clusters, "later") == nil || find(clusters, "c01") != nil || len(clusters) != n+2 {
		t.Fatalf("after add/remove: %d clusters, later %v, c01 %v", len(clusters), find(clusters, "later") != nil, find(clusters, "c01") != nil)
	}
}

// TestRedescribeSpread checks that re-describes of a fleet described at once spread over the
// last tenth of the interval instead of coming in one scan.
func TestRedescribeSpread(t *testing.T) {
	f := eksfake.New(t)
	for i := range 40 {
		f.Add("eu-west-1", fmt.Sprintf("c%02d", i), "ACTIVE", nil)
	}
	l, _, clk := newTestLister(f, []string{"eu-west-1"}, func(o *Options) { o.RedescribeInterval = 100 * time.Second })
	scannertest.ListOK(t, l)
	clk.Add(89 * time.Second)
	f.ResetCounts()
	scannertest.ListOK(t, l)
	if got := f.Count("DescribeCluster"); got != 0 {
		t.Fatalf("DescribeCluster calls before 90%% of the interval = %d, want 0", got)
	}
	clk.Add(6 * time.Second)
	f.ResetCounts()
	scannertest.ListOK(t, l)
	first := f.Count("DescribeCluster")
	clk.Add(5 * time.Second)
	f.ResetCounts()
	scannertest.ListOK(t, l)
	second := f.Count("DescribeCluster")
	if first == 0 || second == 0 || first+second != 40 {
		t.Fatalf("re-describes at 95s and 100s = %d and %d, want both > 0 and 40 in all", first, second)
	}
}

func find(clusters []events.Cluster, eksName string) *events.Cluster {
	for i := range clusters {
		if clusters[i].Attributes[AttrArgoCDClusterName] == eksName {
			return &clusters[i]
		}
	}
	return nil
}

// TestThrottlingRetried: throttled calls are retried and counted as throttled, in both retry
// modes (adaptive mode then rate-limits itself, which takes a moment).
func TestThrottlingRetried(t *testing.T) {
	for _, tt := range []struct {
		mode                 aws.RetryMode
		listThr, describeThr int
	}{{aws.RetryModeStandard, 2, 1}, {aws.RetryModeAdaptive, 1, 0}} {
		t.Run(string(tt.mode), func(t *testing.T) {
			t.Parallel()
			mode := tt.mode
			f := eksfake.New(t)
			f.Add("eu-west-1", "a", "ACTIVE", nil)
			f.Add("eu-west-1", "b", "ACTIVE", nil)
			f.Configure(func(f *eksfake.Server) {
				f.Throttle["ListClusters"] = tt.listThr
				f.Throttle["DescribeCluster"] = tt.describeThr
			})
			l, calls, _ := newTestLister(f, []string{"eu-west-1"}, func(o *Options) { o.RetryMode = mode })
			if got := len(scannertest.ListOK(t, l)); got != 2 {
				t.Fatalf("listed %d clusters, want 2", got)
			}
			for _, c := range []struct {
				op, outcome string
				want        float64
			}{
				{"ListClusters", "throttled", float64(tt.listThr)}, {"ListClusters", "success", 1},
				{"DescribeCluster", "throttled", float64(tt.describeThr)}, {"DescribeCluster", "success", 2},
			} {
				if got := testutil.ToFloat64(calls.WithLabelValues(c.op, c.outcome)); got != c.want {
					t.Errorf("calls{%s,%s} = %v, want %v", c.op, c.outcome, got, c.want)
				}
			}
		})
	}
}

// TestFailures: every failure makes the whole listing an error with the right reason, and no
// error shows the secret key.
func TestFailures(t *testing.T) {
	tests := []struct {
		name       string
		regions    []string
		setup      func(f *eksfake.Server)
		timeout    time.Duration
		wantReason string
		wantMsg    string
	}{
		{name: "access denied", setup: func(f *eksfake.Server) {
			f.Fail["ListClusters"] = eksfake.Error{Status: 403, ErrType: "AccessDeniedException", Message: "User: arn:aws:iam::111122223333:user/x is not authorized to perform: eks:ListClusters"}
		}, wantReason: events.DegradedUnauthorized, wantMsg: "not authorized"},
		{name: "unknown key", setup: func(f *eksfake.Server) { f.KeyID = "AKIDOTHER" },
			wantReason: events.DegradedUnauthorized, wantMsg: "UnrecognizedClientException"},
		{name: "server error", setup: func(f *eksfake.Server) {
			f.Fail["ListClusters"] = eksfake.Error{Status: 500, ErrType: "ServerException", Message: "internal"}
		}, wantReason: events.DegradedListFailed, wantMsg: "500"},
		{name: "throttled beyond the retries", setup: func(f *eksfake.Server) { f.Throttle["ListClusters"] = 100 },
			wantReason: events.DegradedListFailed, wantMsg: "ThrottlingException"},
		{name: "second page fails", setup: func(f *eksfake.Server) {
			f.Fail["ListClusters"] = eksfake.Error{Status: 500, ErrType: "ServerException", Message: "internal", Page: 2}
		}, wantReason: events.DegradedPartial, wantMsg: "page 2"},
		{name: "one region of two fails", regions: []string{"eu-west-1", "us-east-1"}, setup: func(f *eksfake.Server) {
			f.Fail["ListClusters"] = eksfake.Error{Status: 503, ErrType: "ServiceUnavailableException", Message: "unavailable", Region: "us-east-1"}
		}, wantReason: events.DegradedPartial, wantMsg: "region us-east-1"},
		{name: "describe fails", setup: func(f *eksfake.Server) {
			f.Fail["DescribeCluster"] = eksfake.Error{Status: 400, ErrType: "InvalidParameterException", Message: "bad"}
		}, wantReason: events.DegradedListFailed, wantMsg: "DescribeCluster"},
		{name: "garbage body", setup: func(f *eksfake.Server) { f.Garbage = true },
			wantReason: events.DegradedListFailed, wantMsg: "ListClusters"},
		{name: "timeout", setup: func(f *eksfake.Server) { f.Delay = 5 * time.Second }, timeout: 300 * time.Millisecond,
			wantReason: events.DegradedListFailed, wantMsg: "deadline"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := eksfake.New(t)
			for i := range 150 {
				f.Add("eu-west-1", fmt.Sprintf("c%03d", i), "ACTIVE", nil)
			}
			f.Add("us-east-1", "east", "ACTIVE", nil)
			regions := tt.regions
			if regions == nil {
				regions = []string{"eu-west-1"}
			}
			f.Configure(tt.setup)
			l, _, _ := newTestLister(f, regions, nil)
			timeout := tt.timeout
			if timeout == 0 {
				timeout = 10 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			start := time.Now()
			clusters, err := l.List(ctx)
			if err == nil {
				t.Fatalf("List returned %d clusters and no error", len(clusters))
			}
			if clusters != nil {
				t.Errorf("List returned clusters with its error")
			}
			t.Logf("error: %v", err)
			if got := scanner.ReasonOf(err); got != tt.wantReason {
				t.Errorf("reason = %s, want %s (%v)", got, tt.wantReason, err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not contain %q", err, tt.wantMsg)
			}
			if strings.Contains(err.Error(), testSecret) {
				t.Errorf("error shows the secret: %v", err)
			}
			if tt.timeout > 0 && time.Since(start) > 3*time.Second {
				t.Errorf("List took %v after a %v deadline", time.Since(start), tt.timeout)
			}
		})
	}
}

// TestDescribeNotFound: a cluster deleted between ListClusters and DescribeCluster is not
// listed, and the listing is still complete.
func TestDescribeNotFound(t *testing.T) {
	f := eksfake.New(t)
	f.Add("eu-west-1", "a", "ACTIVE", nil)
	f.Add("eu-west-1", "b", "DELETING", nil)
	l, _, _ := newTestLister(f, []string{"eu-west-1"}, nil)
	if got := len(scannertest.ListOK(t, l)); got != 2 {
		t.Fatalf("listed %d, want 2", got)
	}
	// b is still listed by ListClusters but DescribeCluster no longer finds it.
	f.Configure(func(f *eksfake.Server) {
		f.Fail["DescribeCluster"] = eksfake.Error{Status: http.StatusNotFound, ErrType: "ResourceNotFoundException", Message: "No cluster found for name: b."}
	})
	clusters := scannertest.ListOK(t, l)
	if len(clusters) != 1 || find(clusters, "a") == nil {
		t.Fatalf("clusters = %+v, want only a", clusters)
	}
}

// TestAssumeRole: with role_arn, the Secret's keys assume the role through STS and the role's
// credentials sign the EKS calls; the role ARN reaches the Argo CD attributes. A refused
// AssumeRole is Unauthorized.
func TestAssumeRole(t *testing.T) {
	const role = "arn:aws:iam::111122223333:role/enforcement-lister"
	f := eksfake.New(t)
	f.Add("eu-west-1", "a", "ACTIVE", nil)
	f.Configure(func(f *eksfake.Server) { f.RoleARN = role; f.KeyID = "nobody-yet" })
	creds := Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: testSecret, RoleARN: role}
	l, calls, _ := newTestLister(f, []string{"eu-west-1"}, func(o *Options) {
		o.Credentials = func(context.Context) (Credentials, error) { return creds, nil }
	})
	clusters := scannertest.ListOK(t, l)
	if len(clusters) != 1 || clusters[0].Attributes[AttrArgoCDRoleARN] != role {
		t.Fatalf("clusters = %+v", clusters)
	}
	if got := f.Count("AssumeRole"); got != 1 {
		t.Errorf("AssumeRole calls = %d, want 1", got)
	}
	if got := testutil.ToFloat64(calls.WithLabelValues("AssumeRole", "success")); got != 1 {
		t.Errorf("counted AssumeRole = %v, want 1", got)
	}
	// The assumed credentials are cached: a second scan does not assume again.
	scannertest.ListOK(t, l)
	if got := f.Count("AssumeRole"); got != 1 {
		t.Errorf("AssumeRole calls after two scans = %d, want 1", got)
	}

	creds.RoleARN = "arn:aws:iam::111122223333:role/not-allowed"
	_, err := l.List(context.Background())
	if got := scanner.ReasonOf(err); got != events.DegradedUnauthorized || !strings.Contains(fmt.Sprint(err), "AccessDenied") {
		t.Fatalf("refused AssumeRole: reason %s, err %v", got, err)
	}
	if strings.Contains(err.Error(), testSecret) {
		t.Errorf("error shows the secret: %v", err)
	}
}

// TestCredentialsChangeDropsCache: new credentials (maybe another account) describe again.
func TestCredentialsChangeDropsCache(t *testing.T) {
	f := eksfake.New(t)
	f.Add("eu-west-1", "a", "ACTIVE", nil)
	secret := testSecret
	l, _, _ := newTestLister(f, []string{"eu-west-1"}, func(o *Options) {
		o.Credentials = func(context.Context) (Credentials, error) {
			return Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: secret}, nil
		}
	})
	scannertest.ListOK(t, l)
	scannertest.ListOK(t, l)
	if got := f.Count("DescribeCluster"); got != 1 {
		t.Fatalf("DescribeCluster calls = %d, want 1", got)
	}
	secret = "rotated"
	scannertest.ListOK(t, l)
	if got := f.Count("DescribeCluster"); got != 2 {
		t.Fatalf("DescribeCluster calls after the credentials changed = %d, want 2", got)
	}
}

// TestCredentialsError: the callback's error comes back unchanged (the wiring decides its
// reason) and nothing is called.
func TestCredentialsError(t *testing.T) {
	f := eksfake.New(t)
	want := scanner.Degradedf(events.DegradedSecretInvalid, "Secret ns/eks not found")
	l, _, _ := newTestLister(f, []string{"eu-west-1"}, func(o *Options) {
		o.Credentials = func(context.Context) (Credentials, error) { return Credentials{}, want }
	})
	if _, err := l.List(context.Background()); !errors.Is(err, want) {
		t.Fatalf("err = %v, want %v", err, want)
	}
	if f.Count("ListClusters") != 0 {
		t.Fatal("ListClusters was called")
	}
}

// TestDefaultChain: without Secret keys, the SDK's default chain supplies credentials and the
// region (here from the environment); without any region the spec is invalid.
func TestDefaultChain(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AWS_CONFIG_FILE", dir+"/config")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", dir+"/credentials")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", testSecret)
	t.Setenv("AWS_REGION", "ap-south-1")
	f := eksfake.New(t)
	f.Add("ap-south-1", "from-env", "ACTIVE", nil)
	l, _, _ := newTestLister(f, nil, func(o *Options) { o.Credentials = nil })
	clusters := scannertest.ListOK(t, l)
	if len(clusters) != 1 || clusters[0].Attributes["region"] != "ap-south-1" {
		t.Fatalf("clusters = %+v", clusters)
	}

	// No credentials anywhere in the chain: Unauthorized.
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "")
	t.Setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "")
	t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", "")
	l, _, _ = newTestLister(f, nil, func(o *Options) { o.Credentials = nil })
	if _, err := l.List(context.Background()); scanner.ReasonOf(err) != events.DegradedUnauthorized {
		t.Fatalf("no credentials: err = %v, want Unauthorized", err)
	} else {
		t.Logf("no credentials: %v", err)
	}

	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	l, _, _ = newTestLister(f, nil, func(o *Options) { o.Credentials = nil })
	if _, err := l.List(context.Background()); scanner.ReasonOf(err) != events.DegradedInvalidSpec {
		t.Fatalf("no region: err = %v, want InvalidSpec", err)
	}
}

func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := NewCallsCounter(reg)
	c.WithLabelValues("ListClusters", "success").Inc()
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
}

// TestRequestsPerScan counts the AWS calls of scans of 1,000 ACTIVE clusters in two regions
// (600 and 400): a first scan costs ceil(n_region / 100) ListClusters pages per region and one
// DescribeCluster per cluster; a rescan within the re-describe interval only the pages, and a
// cluster new since costs one describe more.
func TestRequestsPerScan(t *testing.T) {
	f := eksfake.New(t)
	for i := range 1000 {
		region := "eu-west-1"
		if i%5 >= 3 {
			region = "us-east-1"
		}
		f.Add(region, fmt.Sprintf("fleet-%04d", i), "ACTIVE", nil)
	}
	l, _, clk := newTestLister(f, []string{"eu-west-1", "us-east-1"}, nil)
	scan := func(what string, wantClusters, wantLists, wantDescribes int) {
		t.Helper()
		f.ResetCounts()
		if got := len(scannertest.ListOK(t, l)); got != wantClusters {
			t.Fatalf("%s: listed %d clusters, want %d", what, got, wantClusters)
		}
		if got := f.Count("ListClusters"); got != wantLists {
			t.Errorf("%s: ListClusters calls = %d, want %d", what, got, wantLists)
		}
		if got := f.Count("DescribeCluster"); got != wantDescribes {
			t.Errorf("%s: DescribeCluster calls = %d, want %d", what, got, wantDescribes)
		}
		if got := f.Count("AssumeRole"); got != 0 {
			t.Errorf("%s: AssumeRole calls = %d, want 0 (no role_arn)", what, got)
		}
	}
	scan("first scan", 1000, 6+4, 1000)
	clk.Add(time.Minute)
	scan("rescan", 1000, 6+4, 0)
	f.Add("us-east-1", "fleet-new", "ACTIVE", nil)
	clk.Add(time.Minute)
	scan("rescan with a new cluster", 1001, 6+5, 1)
}

// TestListPagesHandsOverEachPage: ListPages hands the scanner each ListClusters page once its
// clusters are described; an error of the scanner's stops the listing; after a region fails,
// the regions after it are still listed and described, but none of their pages is handed over.
func TestListPagesHandsOverEachPage(t *testing.T) {
	f := eksfake.New(t)
	for i := range 250 {
		f.Add("eu-west-1", fmt.Sprintf("c%03d", i), "ACTIVE", nil)
	}
	f.Add("us-east-1", "east", "ACTIVE", nil)
	l, _, _ := newTestLister(f, []string{"us-east-1", "eu-west-1"}, nil)
	ctx := context.Background()

	var sizes []int
	record := func(page []events.Cluster) error {
		for _, c := range page {
			if c.State != StatusActive || c.URL == "" || c.Attributes[AttrArgoCDCAData] == nil {
				t.Errorf("cluster %s handed over without its description: %+v", c.Key, c)
			}
		}
		sizes = append(sizes, len(page))
		return nil
	}
	if err := l.ListPages(ctx, record); err != nil {
		t.Fatal(err)
	}
	if want := []int{100, 100, 50, 1}; fmt.Sprint(sizes) != fmt.Sprint(want) {
		t.Errorf("pages handed over = %v, want %v (eu-west-1's three, then us-east-1's)", sizes, want)
	}

	f.ResetCounts()
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
	if got := f.Count("ListClusters"); got != 2 {
		t.Errorf("ListClusters calls after the scanner stopped the listing = %d, want 2", got)
	}

	f.ResetCounts()
	f.Configure(func(f *eksfake.Server) {
		f.Fail["ListClusters"] = eksfake.Error{Status: 503, ErrType: "ServiceUnavailableException", Message: "unavailable", Region: "eu-west-1"}
	})
	f.Add("us-east-1", "east-2", "ACTIVE", nil)
	sizes = nil
	err = l.ListPages(ctx, record)
	if scanner.ReasonOf(err) != events.DegradedPartial || !strings.Contains(err.Error(), "region eu-west-1") {
		t.Errorf("ListPages = %v, want PartialListing naming region eu-west-1", err)
	}
	if len(sizes) != 0 {
		t.Errorf("pages handed over after eu-west-1 failed: %v, want none", sizes)
	}
	if got := f.Count("DescribeCluster"); got != 1 {
		t.Errorf("DescribeCluster calls = %d, want 1: us-east-1 is still listed and its new cluster described", got)
	}
}
