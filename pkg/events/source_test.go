package events

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"strings"
	"testing"
	"time"
)

// TestSourceIDGolden pins the algorithm: inventories and subjects are keyed by these ids, so a
// change must fail here.
func TestSourceIDGolden(t *testing.T) {
	tests := []struct {
		kind, ns, secret string
		filters          map[string]string
		want             string
	}{
		{"rancher", "enforcement", "rancher", map[string]string{"driver": "gke", "a": "b"}, "6c9f0570fcd96339"},
		// printf 'rancher\0enforcement\0rancher\0a=1\0b=2\0' | sha256sum | cut -c1-16
		{"rancher", "enforcement", "rancher", map[string]string{"b": "2", "a": "1"}, "2d9ba57e32783940"},
		{"rancher", "enforcement", "rancher", map[string]string{"driver": "googleKubernetesEngine"}, "d79ab3e43ffbc255"},
		{"rancher", "enforcement", "rancher", nil, "9c2fe8081654e22d"},
		{"static", "enforcement", "static", nil, "4af7e3c0b3078a02"},
		{"static", "enforcement", "static", map[string]string{"configMap": "lab"}, "7906d3c1a9d1a923"},
		{"eks", "enforcement", "eks-keys", map[string]string{"regions": "eu-west-1,us-east-1"}, "01348ff4cf719903"},
		{"gke", "enforcement", "gke", map[string]string{"location": "europe-*", "projects": "a,b"}, "f111a8b5dbf9f730"},
		{"ocm", "enforcement", "ocm", nil, "9c0f40783f8a737f"},
	}
	for _, tt := range tests {
		if got := SourceID(tt.kind, tt.ns, tt.secret, tt.filters); got != tt.want {
			t.Errorf("SourceID(%s, %s, %s, %v) = %s, want %s", tt.kind, tt.ns, tt.secret, tt.filters, got, tt.want)
		}
	}
	a := SourceID("rancher", "enforcement", "rancher", map[string]string{"driver": "gke", "a": "b"})
	for _, other := range []string{
		SourceID("rancher", "enforcement", "rancher-secret", map[string]string{"driver": "gke", "a": "b"}),
		SourceID("gke", "enforcement", "rancher", map[string]string{"driver": "gke", "a": "b"}),
		SourceID("rancher", "other", "rancher", map[string]string{"driver": "gke", "a": "b"}),
		SourceID("rancher", "enforcement", "rancher", map[string]string{"driver": "gke", "a": "c"}),
		SourceID("rancher", "enforcementr", "ancher", map[string]string{"driver": "gke", "a": "b"}),
	} {
		if other == a {
			t.Errorf("different source, same id %s", a)
		}
	}
}

func TestNewSourceRef(t *testing.T) {
	ref := NewSourceRef(SourceKindEKS, "op", "", EKSSourceFilters([]string{"b", "a"}))
	want := SourceRef{Kind: "eks", ID: SourceID("eks", "op", "eks", map[string]string{"regions": "a,b"}), SecretNamespace: "op", SecretName: "eks"}
	if ref != want {
		t.Errorf("NewSourceRef = %+v, want %+v", ref, want)
	}
	if got := NewSourceRef(SourceKindRancher, "op", "rancher-secret", nil).SecretName; got != "rancher-secret" {
		t.Errorf("secret name %q", got)
	}
}

func TestSourceFilters(t *testing.T) {
	tests := []struct {
		name string
		got  map[string]string
		want map[string]string
	}{
		{"rancher", RancherSourceFilters(map[string]string{"driver": "rke"}), map[string]string{"driver": "rke"}},
		{"rancher none", RancherSourceFilters(map[string]string{}), nil},
		{"static default", StaticSourceFilters(""), nil},
		{"static default named", StaticSourceFilters(DefaultStaticConfigMap), nil},
		{"static other", StaticSourceFilters("lab"), map[string]string{"configMap": "lab"}},
		{"eks", EKSSourceFilters([]string{"us-east-1", " eu-west-1", "us-east-1", ""}), map[string]string{"regions": "eu-west-1,us-east-1"}},
		{"eks none", EKSSourceFilters([]string{" "}), nil},
		{"gke", GKESourceFilters([]string{"b", "a", "b"}, map[string]string{"location": "eu*"}), map[string]string{"projects": "a,b", "location": "eu*"}},
		{"gke filters only", GKESourceFilters(nil, map[string]string{"location": "eu*"}), map[string]string{"location": "eu*"}},
		{"gke none", GKESourceFilters(nil, nil), nil},
		{"clusterprofile", ClusterProfileSourceFilters([]string{" b", "a", "b", ""}), map[string]string{"namespaces": "a,b"}},
		{"clusterprofile every namespace", ClusterProfileSourceFilters(nil), nil},
	}
	for _, tt := range tests {
		if fmt.Sprint(tt.got) != fmt.Sprint(tt.want) || (tt.want == nil) != (tt.got == nil) {
			t.Errorf("%s: %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	in := map[string]string{"location": "eu*"}
	GKESourceFilters([]string{"a"}, in)["x"] = "y"
	if len(in) != 1 {
		t.Error("GKESourceFilters changed the rule's filters")
	}
}

// testCertPEM is a self-signed certificate, as a Rancher server's CA.
func testCertPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

const testToken = "s3cr3t-tok"

// checkErr asserts err is a *SecretKeyError for key whose message contains want and no secret.
func checkErr(t *testing.T, err error, key, want string) {
	t.Helper()
	var ke *SecretKeyError
	if !errors.As(err, &ke) || ke.Key != key || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want a SecretKeyError for key %q containing %q", err, key, want)
	}
	if strings.Contains(err.Error(), testToken) {
		t.Fatalf("error %q contains the secret", err)
	}
}

func TestParseRancherSecret(t *testing.T) {
	ca := testCertPEM(t)
	tests := []struct {
		name     string
		data     map[string]string
		wantURL  string
		errKey   string
		wantErr  string
		insecure bool
	}{
		{name: "original two keys", data: map[string]string{"url": "https://rancher.test.com", "token": "abc94943#434!"}, wantURL: "https://rancher.test.com"},
		{name: "trailing slash and /v3", data: map[string]string{"url": "https://r.example/v3/", "token": testToken}, wantURL: "https://r.example"},
		{name: "query dropped", data: map[string]string{"url": "https://r.example/rancher?x=1#f", "token": testToken}, wantURL: "https://r.example/rancher"},
		{name: "caCert and insecure", data: map[string]string{"url": "https://r", "token": testToken, "caCert": string(ca), "insecure": "true"}, wantURL: "https://r", insecure: true},
		{name: "missing url", data: map[string]string{"token": testToken}, errKey: "url", wantErr: "is missing"},
		{name: "relative url", data: map[string]string{"url": "rancher.local", "token": testToken}, errKey: "url", wantErr: "not an absolute"},
		{name: "malformed url not echoed", data: map[string]string{"url": "https://r.example:" + testToken + "/", "token": "t"}, errKey: "url", wantErr: "not an absolute"},
		{name: "url with user information", data: map[string]string{"url": "https://admin:" + testToken + "@r.example", "token": "t"},
			errKey: "url", wantErr: "(https://redacted@r.example) has user information"},
		{name: "url with a user only", data: map[string]string{"url": "https://" + testToken + "@r.example", "token": "t"}, errKey: "url", wantErr: "user information"},
		{name: "missing token", data: map[string]string{"url": "https://r"}, errKey: "token", wantErr: "is missing"},
		{name: "blank token", data: map[string]string{"url": "https://r", "token": " \n"}, errKey: "token", wantErr: "is missing"},
		{name: "bad insecure", data: map[string]string{"url": "https://r", "token": testToken, "insecure": "maybe"}, errKey: "insecure", wantErr: "not a boolean"},
		{name: "bad caCert", data: map[string]string{"url": "https://r", "token": testToken, "caCert": "nope"}, errKey: "caCert", wantErr: "no PEM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseRancherSecret(bytesMap(tt.data))
			if tt.errKey != "" {
				checkErr(t, err, tt.errKey, tt.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.URL.String() != tt.wantURL || c.Token != strings.TrimSpace(tt.data["token"]) || c.Insecure != tt.insecure {
				t.Fatalf("credentials url %s insecure %t, want %s %t", c.URL, c.Insecure, tt.wantURL, tt.insecure)
			}
			if s := fmt.Sprintf("%v %+v %#v", c, c, c.Cluster()); strings.Contains(s, c.Token) {
				t.Fatalf("formatting shows the token: %s", s)
			}
			if cc := c.Cluster(); cc.Token != c.Token || string(cc.CACert) != string(c.CACert) || cc.Insecure != c.Insecure {
				t.Fatalf("Cluster() = %v", cc)
			}
		})
	}
}

func TestParseClusterSecret(t *testing.T) {
	tests := []struct {
		name    string
		data    map[string]string
		want    ClusterCredentials
		errKey  string
		wantErr string
	}{
		{name: "token", data: map[string]string{"url": "https://r", "token": testToken + "\n"}, want: ClusterCredentials{Token: testToken}},
		{name: "bearerToken", data: map[string]string{"bearerToken": testToken}, want: ClusterCredentials{Token: testToken}},
		{name: "caCert and insecure", data: map[string]string{"token": "t", "caCert": "PEM", "insecure": "true"}, want: ClusterCredentials{Token: "t", CACert: []byte("PEM"), Insecure: true}},
		{name: "caData", data: map[string]string{"token": "t", "caData": "PEM"}, want: ClusterCredentials{Token: "t", CACert: []byte("PEM")}},
		{name: "ocm add-on keys", data: map[string]string{"token": "t", "ca.crt": "PEM"}, want: ClusterCredentials{Token: "t", CACert: []byte("PEM")}},
		{name: "no token", data: map[string]string{"url": "https://r"}, errKey: "token", wantErr: "is missing"},
		{name: "bad insecure", data: map[string]string{"token": testToken, "insecure": "maybe"}, errKey: "insecure", wantErr: "not a boolean"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseClusterSecret(bytesMap(tt.data))
			if tt.errKey != "" {
				checkErr(t, err, tt.errKey, tt.wantErr)
				return
			}
			if err != nil || c.Token != tt.want.Token || string(c.CACert) != string(tt.want.CACert) || c.Insecure != tt.want.Insecure {
				t.Fatalf("ParseClusterSecret = %v %q %t, %v", c, c.CACert, c.Insecure, err)
			}
		})
	}
}

func TestParseEKSSecret(t *testing.T) {
	tests := []struct {
		name    string
		data    map[string]string
		want    EKSCredentials
		errKey  string
		wantErr string
	}{
		{name: "empty is the default chain", data: nil, want: EKSCredentials{}},
		{name: "static keys", data: map[string]string{"aws_access_key_id": " AKID\n", "aws_secret_access_key": testToken},
			want: EKSCredentials{AccessKeyID: "AKID", SecretAccessKey: testToken}},
		{name: "static keys, session and role", data: map[string]string{"aws_access_key_id": "AKID", "aws_secret_access_key": testToken,
			"aws_session_token": "sess", "role_arn": "arn:aws:iam::111122223333:role/lister"},
			want: EKSCredentials{AccessKeyID: "AKID", SecretAccessKey: testToken, SessionToken: "sess", RoleARN: "arn:aws:iam::111122223333:role/lister"}},
		{name: "role only (default chain assumes it)", data: map[string]string{"role_arn": "arn:aws-cn:iam::111122223333:role/path/lister"},
			want: EKSCredentials{RoleARN: "arn:aws-cn:iam::111122223333:role/path/lister"}},
		{name: "key id without secret", data: map[string]string{"aws_access_key_id": "AKID"}, errKey: "aws_access_key_id", wantErr: `"aws_secret_access_key" is missing`},
		{name: "secret without key id", data: map[string]string{"aws_secret_access_key": testToken}, errKey: "aws_secret_access_key", wantErr: `"aws_access_key_id" is missing`},
		{name: "session token alone", data: map[string]string{"aws_session_token": "sess"}, errKey: "aws_session_token", wantErr: "needs"},
		{name: "role arn of a user", data: map[string]string{"role_arn": "arn:aws:iam::111122223333:user/bob"}, errKey: "role_arn", wantErr: "not an IAM role ARN"},
		{name: "role arn garbage", data: map[string]string{"role_arn": "lister"}, errKey: "role_arn", wantErr: "not an IAM role ARN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseEKSSecret(bytesMap(tt.data))
			if tt.errKey != "" {
				checkErr(t, err, tt.errKey, tt.wantErr)
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseEKSSecret = %v, %v; want %v", got, err, tt.want)
			}
			if s := fmt.Sprintf("%v %+v %#v %s", got, got, got, got); strings.Contains(s, testToken) || (got.SessionToken != "" && strings.Contains(s, got.SessionToken)) {
				t.Fatalf("formatting the credentials shows a secret: %s", s)
			}
		})
	}
	a, _ := ParseEKSSecret(bytesMap(map[string]string{"aws_access_key_id": "AKID", "aws_secret_access_key": "one"}))
	b, _ := ParseEKSSecret(bytesMap(map[string]string{"aws_access_key_id": "AKID", "aws_secret_access_key": "two"}))
	if a.Fingerprint() == b.Fingerprint() || strings.Contains(a.Fingerprint(), "one") {
		t.Error("Fingerprint does not tell the secrets apart, or shows one")
	}
}

func TestParseGKESecret(t *testing.T) {
	key := map[string]any{"type": "service_account", "project_id": "proj-a", "client_email": "lister@proj-a.iam.gserviceaccount.com",
		"private_key": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte(testToken)}))}
	with := func(k string, v any) []byte {
		c := map[string]any{}
		for kk, vv := range key {
			c[kk] = vv
		}
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		b, _ := json.Marshal(c)
		return b
	}
	good := with("type", "service_account")
	tests := []struct {
		name    string
		data    []byte
		wantErr string
	}{
		{name: "service-account key", data: good},
		{name: "missing", data: nil, wantErr: "is missing"},
		{name: "not JSON", data: []byte("-----BEGIN PRIVATE KEY-----"), wantErr: "not JSON"},
		{name: "external account", data: with("type", "external_account"), wantErr: `type "external_account"`},
		{name: "no email", data: with("client_email", nil), wantErr: "no client_email"},
		{name: "no private key", data: with("private_key", "nope"), wantErr: "no PEM private_key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseGKESecret(map[string][]byte{"key.json": tt.data})
			if tt.wantErr != "" {
				checkErr(t, err, "key.json", tt.wantErr)
				if strings.Contains(err.Error(), "PRIVATE KEY") {
					t.Fatalf("error shows the key: %v", err)
				}
				return
			}
			if err != nil || c.ProjectID != "proj-a" || string(c.KeyJSON) != string(good) {
				t.Fatalf("ParseGKESecret = %v, %v", c, err)
			}
			if s := fmt.Sprintf("%v %+v %#v", c, c, c); strings.Contains(s, "PRIVATE") {
				t.Fatalf("formatting shows the key: %s", s)
			}
		})
	}
}

func TestParseOCMSecret(t *testing.T) {
	if _, err := ParseOCMSecret(map[string][]byte{"kubeconfig": []byte(" \n")}); err == nil {
		t.Fatal("blank kubeconfig accepted")
	} else {
		checkErr(t, err, "kubeconfig", "is missing")
	}
	c, err := ParseOCMSecret(map[string][]byte{"kubeconfig": []byte("apiVersion: v1")})
	if err != nil || string(c.Kubeconfig) != "apiVersion: v1" || strings.Contains(fmt.Sprintf("%v %#v", c, c), "apiVersion") {
		t.Fatalf("ParseOCMSecret = %v, %v", c, err)
	}
}

func bytesMap(in map[string]string) map[string][]byte {
	out := make(map[string][]byte, len(in))
	for k, v := range in {
		out[k] = []byte(v)
	}
	return out
}

func TestParseAKSSecret(t *testing.T) {
	const secret = "s3cr3t-value~x"
	tests := []struct {
		name    string
		data    map[string]string
		wantErr string
		wantKey string
	}{
		{name: "empty: ambient identity", data: map[string]string{}},
		{name: "subscription only", data: map[string]string{"subscription_id": "sub-1"}},
		{name: "client secret", data: map[string]string{"tenant_id": "contoso.onmicrosoft.com", "client_id": "app-1", "client_secret": secret}},
		{name: "no tenant", data: map[string]string{"client_id": "app-1", "client_secret": secret}, wantKey: "client_secret", wantErr: `"tenant_id" is missing`},
		{name: "no client", data: map[string]string{"tenant_id": "t", "client_secret": secret}, wantKey: "client_secret", wantErr: `"client_id" is missing`},
		{name: "ids without secret", data: map[string]string{"tenant_id": "t", "client_id": "app-1"}, wantKey: "client_secret", wantErr: "is missing or empty but"},
		{name: "tenant with a path", data: map[string]string{"tenant_id": "t/../x", "client_id": "app-1", "client_secret": secret}, wantKey: "tenant_id", wantErr: "not a tenant id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseAKSSecret(bytesMap(tt.data))
			if tt.wantErr != "" {
				checkErr(t, err, tt.wantKey, tt.wantErr)
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("error shows the secret: %v", err)
				}
				return
			}
			if err != nil || c.ClientSecret != tt.data["client_secret"] || c.SubscriptionID != tt.data["subscription_id"] {
				t.Fatalf("ParseAKSSecret = %v, %v", c, err)
			}
			if s := fmt.Sprintf("%v %+v %#v %s", c, c, c, c.Fingerprint()); strings.Contains(s, secret) {
				t.Fatalf("formatting shows the secret: %s", s)
			}
		})
	}
}

func TestAKSSourceFilters(t *testing.T) {
	got := AKSSourceFilters([]string{"Sub-B", "sub-a", "sub-b", " "}, []string{"RG-1", "rg-1"})
	want := map[string]string{"subscriptions": "sub-a,sub-b", "resourceGroups": "rg-1"}
	if !maps.Equal(got, want) {
		t.Fatalf("AKSSourceFilters = %v, want %v", got, want)
	}
	if got := AKSSourceFilters(nil, nil); got != nil {
		t.Fatalf("AKSSourceFilters(nil, nil) = %v", got)
	}
}
