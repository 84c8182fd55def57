package eks

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeEKS reproduces the EKS REST-JSON API (ListClusters, DescribeCluster) and STS's AssumeRole
// (query protocol, XML answers) closely enough for the real SDK client: paths, query
// parameters, body shapes, and errors as AWS sends them (HTTP status, x-amzn-ErrorType header,
// {"message": ...} body). It checks the SigV4 Authorization header of every EKS request and
// routes it to the region named in its credential scope.
type fakeEKS struct {
	t   testing.TB
	srv *httptest.Server

	mu sync.Mutex
	// clusters by region and name: the "cluster" object DescribeCluster returns.
	clusters map[string]map[string]map[string]any
	// keyID is the access key id requests must be signed with.
	keyID string
	// calls counts answered requests by operation ("ListClusters", "DescribeCluster",
	// "AssumeRole"), retries included.
	calls map[string]int
	// throttle makes the next n calls of an operation answer 429 ThrottlingException.
	throttle map[string]int
	// fail makes every call of an operation answer this error (optionally only for one region or
	// from one page on).
	fail map[string]fakeError
	// delay delays every answer (timeouts).
	delay time.Duration
	// garbage answers ListClusters with a body that is not JSON.
	garbage bool
	// roleARN is the role AssumeRole accepts; the credentials it returns sign later requests.
	roleARN string
	// badAuth collects Authorization headers that did not have SigV4's shape.
	badAuth []string
}

// fakeError is an AWS error answer.
type fakeError struct {
	status  int
	errType string
	message string
	region  string // "" for every region
	page    int    // ListClusters: fail from this page on (0 or 1: every page)
}

var sigV4 = regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=([A-Z0-9]+)/(\d{8})/([a-z0-9-]+)/(eks|sts)/aws4_request, SignedHeaders=([a-z0-9;-]+), Signature=[0-9a-f]{64}$`)

func newFakeEKS(t testing.TB) *fakeEKS {
	f := &fakeEKS{
		t: t, keyID: "AKIDEXAMPLE",
		clusters: map[string]map[string]map[string]any{},
		calls:    map[string]int{}, throttle: map[string]int{}, fail: map[string]fakeError{},
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.badAuth) > 0 {
			t.Errorf("requests without a valid SigV4 Authorization header: %q", f.badAuth)
		}
	})
	return f
}

// add adds a cluster in the shape DescribeCluster returns.
func (f *fakeEKS) add(region, name, status string, tags map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.clusters[region] == nil {
		f.clusters[region] = map[string]map[string]any{}
	}
	arn := fmt.Sprintf("arn:aws:eks:%s:111122223333:cluster/%s", region, name)
	tagsAny := map[string]any{}
	for k, v := range tags {
		tagsAny[k] = v
	}
	f.clusters[region][name] = map[string]any{
		"name":            name,
		"arn":             arn,
		"createdAt":       1.7e9,
		"version":         "1.30",
		"endpoint":        "https://" + strings.ToUpper(name) + ".gr7." + region + ".eks.amazonaws.com",
		"roleArn":         "arn:aws:iam::111122223333:role/eks-cluster",
		"status":          status,
		"platformVersion": "eks.5",
		"tags":            tagsAny,
		"certificateAuthority": map[string]any{
			"data": base64.StdEncoding.EncodeToString([]byte("-----BEGIN CERTIFICATE-----\nMIIC" + name + "\n-----END CERTIFICATE-----\n")),
		},
		"resourcesVpcConfig": map[string]any{
			"subnetIds": []any{"subnet-1", "subnet-2"}, "securityGroupIds": []any{},
			"clusterSecurityGroupId": "sg-1", "vpcId": "vpc-1",
			"endpointPublicAccess": true, "endpointPrivateAccess": false, "publicAccessCidrs": []any{"0.0.0.0/0"},
		},
		"kubernetesNetworkConfig": map[string]any{"serviceIpv4Cidr": "10.100.0.0/16", "ipFamily": "ipv4"},
		"identity":                map[string]any{"oidc": map[string]any{"issuer": "https://oidc.eks." + region + ".amazonaws.com/id/ABC"}},
		"logging":                 map[string]any{"clusterLogging": []any{map[string]any{"types": []any{"api", "audit"}, "enabled": false}}},
		"accessConfig":            map[string]any{"authenticationMode": "API_AND_CONFIG_MAP"},
		"clientRequestToken":      "token-" + name,
	}
}

// set changes a field of a cluster.
func (f *fakeEKS) set(region, name, field string, v any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clusters[region][name][field] = v
}

func (f *fakeEKS) remove(region, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.clusters[region], name)
}

func (f *fakeEKS) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

func (f *fakeEKS) resetCounts() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = map[string]int{}
}

func (f *fakeEKS) configure(fn func(f *fakeEKS)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeEKS) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	delay := f.delay
	f.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	auth := r.Header.Get("Authorization")
	m := sigV4.FindStringSubmatch(auth)
	if m == nil {
		f.mu.Lock()
		f.badAuth = append(f.badAuth, auth)
		f.mu.Unlock()
		awsError(w, http.StatusForbidden, "MissingAuthenticationTokenException", "Missing Authentication Token")
		return
	}
	keyID, date, region, service := m[1], m[2], m[3], m[4]
	if date != time.Now().UTC().Format("20060102") {
		f.t.Errorf("SigV4 credential date %s is not today", date)
	}
	if service == "sts" {
		f.assumeRole(w, r)
		return
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if keyID != f.keyID {
		awsError(w, http.StatusForbidden, "UnrecognizedClientException", "The security token included in the request is invalid.")
		return
	}
	var op string
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/clusters":
		op = "ListClusters"
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/clusters/"):
		op = "DescribeCluster"
	default:
		awsError(w, http.StatusNotFound, "UnknownOperationException", "unknown operation "+r.Method+" "+r.URL.Path)
		return
	}
	f.calls[op]++
	if f.throttle[op] > 0 {
		f.throttle[op]--
		awsError(w, http.StatusTooManyRequests, "ThrottlingException", "Rate exceeded")
		return
	}
	q := r.URL.Query()
	page := 1
	if tok := q.Get("nextToken"); tok != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(tok, "page-"))
		if err != nil {
			awsError(w, http.StatusBadRequest, "InvalidParameterException", "The nextToken is invalid.")
			return
		}
		page = n
	}
	if e, ok := f.fail[op]; ok && (e.region == "" || e.region == region) && page >= e.page {
		awsError(w, e.status, e.errType, e.message)
		return
	}
	switch op {
	case "ListClusters":
		if q.Get("maxResults") != "100" {
			f.t.Errorf("ListClusters maxResults = %q, want 100", q.Get("maxResults"))
		}
		if f.garbage {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`<html>proxy error</html>`))
			return
		}
		names := make([]string, 0, len(f.clusters[region]))
		for n := range f.clusters[region] {
			names = append(names, n)
		}
		sort.Strings(names)
		size := 100
		start := (page - 1) * size
		end := min(start+size, len(names))
		body := map[string]any{"clusters": []string{}}
		if start < len(names) {
			body["clusters"] = names[start:end]
		}
		if end < len(names) {
			body["nextToken"] = fmt.Sprintf("page-%d", page+1)
		}
		writeJSON(w, http.StatusOK, body)
	case "DescribeCluster":
		name, _ := url.PathUnescape(strings.TrimPrefix(r.URL.Path, "/clusters/"))
		c, ok := f.clusters[region][name]
		if !ok {
			awsError(w, http.StatusNotFound, "ResourceNotFoundException", "No cluster found for name: "+name+".")
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"cluster": c})
	}
}

// assumeRole answers STS AssumeRole (query protocol: a form POST, an XML answer).
func (f *fakeEKS) assumeRole(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["AssumeRole"]++
	if r.Form.Get("Action") != "AssumeRole" || r.Form.Get("RoleArn") != f.roleARN {
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, `<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>User is not authorized to perform: sts:AssumeRole on resource: %s</Message></Error><RequestId>req-1</RequestId></ErrorResponse>`, r.Form.Get("RoleArn"))
		return
	}
	f.keyID = "ASIAASSUMED"
	w.Header().Set("Content-Type", "text/xml")
	fmt.Fprintf(w, `<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleResult>
    <AssumedRoleUser><Arn>%s/%s</Arn><AssumedRoleId>AROA123:%s</AssumedRoleId></AssumedRoleUser>
    <Credentials>
      <AccessKeyId>ASIAASSUMED</AccessKeyId>
      <SecretAccessKey>assumed-secret</SecretAccessKey>
      <SessionToken>assumed-session-token</SessionToken>
      <Expiration>%s</Expiration>
    </Credentials>
  </AssumeRoleResult>
  <ResponseMetadata><RequestId>req-2</RequestId></ResponseMetadata>
</AssumeRoleResponse>`, f.roleARN, r.Form.Get("RoleSessionName"), r.Form.Get("RoleSessionName"), time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
}

// awsError writes an error the way AWS REST-JSON services do.
func awsError(w http.ResponseWriter, status int, errType, message string) {
	w.Header().Set("x-amzn-ErrorType", errType+":http://internal.amazon.com/coral/com.amazon.eks/")
	w.Header().Set("x-amzn-RequestId", "11111111-2222-3333-4444-555555555555")
	writeJSON(w, status, map[string]any{"message": message})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
