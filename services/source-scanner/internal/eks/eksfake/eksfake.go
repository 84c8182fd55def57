// Package eksfake is an Amazon EKS (and STS AssumeRole) compatible HTTP server for tests of the
// eks lister and of the source-scanner service: the real aws-sdk-go-v2 client talks to it through
// its endpoint override. It is a fake of a cloud API, which the brief allows; NATS and Kubernetes
// are never faked.
package eksfake

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

// Server reproduces the EKS REST-JSON API (ListClusters, DescribeCluster) and STS's AssumeRole
// (query protocol, XML answers) closely enough for the real SDK client: paths, query
// parameters, body shapes, and errors as AWS sends them (HTTP status, x-amzn-ErrorType header,
// {"message": ...} body). It checks the SigV4 Authorization header of every EKS request and
// routes it to the region named in its credential scope.
//
// Fields are guarded by the server's lock: set them in a Configure callback once the server runs.
type Server struct {
	*httptest.Server
	t testing.TB

	mu sync.Mutex
	// Clusters by region and name: the "cluster" object DescribeCluster returns.
	Clusters map[string]map[string]map[string]any
	// KeyID is the access key id requests must be signed with.
	KeyID string
	// calls counts answered requests by operation ("ListClusters", "DescribeCluster",
	// "AssumeRole"), retries included.
	calls map[string]int
	// Throttle makes the next n calls of an operation answer 429 ThrottlingException.
	Throttle map[string]int
	// Fail makes every call of an operation answer this error (optionally only for one region or
	// from one page on).
	Fail map[string]Error
	// Delay delays every answer (timeouts).
	Delay time.Duration
	// Garbage answers ListClusters with a body that is not JSON.
	Garbage bool
	// RoleARN is the role AssumeRole accepts; the credentials it returns sign later requests.
	RoleARN string
	// badAuth collects Authorization headers that did not have SigV4's shape.
	badAuth []string
}

// Error is an AWS error answer.
type Error struct {
	Status  int
	ErrType string
	Message string
	Region  string // "" for every region
	Page    int    // ListClusters: fail from this page on (0 or 1: every page)
}

var sigV4 = regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=([A-Z0-9]+)/(\d{8})/([a-z0-9-]+)/(eks|sts)/aws4_request, SignedHeaders=([a-z0-9;-]+), Signature=[0-9a-f]{64}$`)

// DefaultKeyID is the access key id a new Server accepts (any secret key signs).
const DefaultKeyID = "AKIDEXAMPLE"

// New starts a fake EKS (plain HTTP; use its URL as the EKS and the STS endpoint). It stops when
// the test ends, and fails the test if a request was not SigV4-signed.
func New(t testing.TB) *Server {
	f := &Server{
		t: t, KeyID: DefaultKeyID,
		Clusters: map[string]map[string]map[string]any{},
		calls:    map[string]int{}, Throttle: map[string]int{}, Fail: map[string]Error{},
	}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.badAuth) > 0 {
			t.Errorf("requests without a valid SigV4 Authorization header: %q", f.badAuth)
		}
	})
	return f
}

// Add adds a cluster in the shape DescribeCluster returns.
func (f *Server) Add(region, name, status string, tags map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Clusters[region] == nil {
		f.Clusters[region] = map[string]map[string]any{}
	}
	arn := fmt.Sprintf("arn:aws:eks:%s:111122223333:cluster/%s", region, name)
	tagsAny := map[string]any{}
	for k, v := range tags {
		tagsAny[k] = v
	}
	f.Clusters[region][name] = map[string]any{
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

// Set changes a field of a cluster.
func (f *Server) Set(region, name, field string, v any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Clusters[region][name][field] = v
}

// Remove deletes a cluster.
func (f *Server) Remove(region, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.Clusters[region], name)
}

// Count returns the answered requests of an operation (ListClusters, DescribeCluster,
// AssumeRole), retries included.
func (f *Server) Count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// ResetCounts sets every count to zero.
func (f *Server) ResetCounts() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = map[string]int{}
}

// Configure runs fn under the server's lock, to change its fields.
func (f *Server) Configure(fn func(f *Server)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *Server) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	delay := f.Delay
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
	if keyID != f.KeyID {
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
	if f.Throttle[op] > 0 {
		f.Throttle[op]--
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
	if e, ok := f.Fail[op]; ok && (e.Region == "" || e.Region == region) && page >= e.Page {
		awsError(w, e.Status, e.ErrType, e.Message)
		return
	}
	if op == "ListClusters" {
		f.listClusters(w, region, page, q.Get("maxResults"))
		return
	}
	name, _ := url.PathUnescape(strings.TrimPrefix(r.URL.Path, "/clusters/"))
	f.describeCluster(w, region, name)
}

// listClusters answers one ListClusters page of region, 100 names a page. f.mu is held.
func (f *Server) listClusters(w http.ResponseWriter, region string, page int, maxResults string) {
	if maxResults != "100" {
		f.t.Errorf("ListClusters maxResults = %q, want 100", maxResults)
	}
	if f.Garbage {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`<html>proxy error</html>`))
		return
	}
	names := make([]string, 0, len(f.Clusters[region]))
	for n := range f.Clusters[region] {
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
}

// describeCluster answers DescribeCluster for one cluster of region. f.mu is held.
func (f *Server) describeCluster(w http.ResponseWriter, region, name string) {
	c, ok := f.Clusters[region][name]
	if !ok {
		awsError(w, http.StatusNotFound, "ResourceNotFoundException", "No cluster found for name: "+name+".")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"cluster": c})
}

// assumeRole answers STS AssumeRole (query protocol: a form POST, an XML answer).
func (f *Server) assumeRole(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["AssumeRole"]++
	if r.Form.Get("Action") != "AssumeRole" || r.Form.Get("RoleArn") != f.RoleARN {
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, `<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>User is not authorized to perform: sts:AssumeRole on resource: %s</Message></Error><RequestId>req-1</RequestId></ErrorResponse>`, r.Form.Get("RoleArn"))
		return
	}
	f.KeyID = "ASIAASSUMED"
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
</AssumeRoleResponse>`, f.RoleARN, r.Form.Get("RoleSessionName"), r.Form.Get("RoleSessionName"), time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
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
