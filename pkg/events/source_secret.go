package events

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// The keys of source Secrets, read from the Secret's data. Events only ever carry a reference to
// a Secret (SourceRef.SecretNamespace/SecretName), never its data.
const (
	// SecretKeyURL is a rancher source's server URL (one of the original operator's two keys).
	SecretKeyURL = "url"
	// SecretKeyToken is a bearer token: a rancher source's API token (the original's other key),
	// and the token a static or OCM cluster is registered in Argo CD with.
	SecretKeyToken = "token"
	// SecretKeyCACert is an optional PEM CA bundle the server certificate must chain to.
	SecretKeyCACert = "caCert"
	// SecretKeyInsecure is an optional boolean that skips TLS verification.
	SecretKeyInsecure = "insecure"

	// SecretKeyBearerToken is accepted for SecretKeyToken in cluster credentials Secrets.
	SecretKeyBearerToken = "bearerToken"
	// SecretKeyCAData is accepted for SecretKeyCACert in cluster credentials Secrets.
	SecretKeyCAData = "caData"
	// SecretKeyCACRT is accepted for SecretKeyCACert in cluster credentials Secrets: the key the
	// OCM managed-serviceaccount add-on writes.
	SecretKeyCACRT = "ca.crt"

	// SecretKeyAWSAccessKeyID, SecretKeyAWSSecretAccessKey and SecretKeyAWSSessionToken are an
	// eks source's optional static access key; SecretKeyAWSRoleARN an optional role to assume.
	SecretKeyAWSAccessKeyID     = "aws_access_key_id"
	SecretKeyAWSSecretAccessKey = "aws_secret_access_key"
	SecretKeyAWSSessionToken    = "aws_session_token"
	SecretKeyAWSRoleARN         = "role_arn"

	// SecretKeyGCPServiceAccount is a gke source's service-account key (the JSON file
	// `gcloud iam service-accounts keys create` writes).
	SecretKeyGCPServiceAccount = "key.json"

	// SecretKeyKubeconfig is an ocm source's kubeconfig of a remote hub.
	SecretKeyKubeconfig = "kubeconfig"
)

// SecretKeyError says a key of a source Secret is missing or malformed. Its message names the
// key and never contains a secret value.
type SecretKeyError struct {
	// Key is the Secret key at fault.
	Key string
	// Problem completes the sentence `key "<Key>" ...`.
	Problem string
}

// Error returns `key "<Key>" <Problem>`.
func (e *SecretKeyError) Error() string { return fmt.Sprintf("key %q %s", e.Key, e.Problem) }

func keyError(key, format string, args ...any) error {
	return &SecretKeyError{Key: key, Problem: fmt.Sprintf(format, args...)}
}

// secretValue is a key's value with surrounding white space removed.
func secretValue(data map[string][]byte, key string) string {
	return strings.TrimSpace(string(data[key]))
}

// RancherCredentials are what a rancher source Secret holds. Token is only ever sent in the
// Authorization header of requests to URL's host. String never shows the token.
type RancherCredentials struct {
	// URL is the server's base URL, without a trailing "/" or "/v3", query or fragment.
	URL      *url.URL
	Token    string
	CACert   []byte
	Insecure bool
}

// String describes the credentials without the token.
func (c RancherCredentials) String() string {
	if c.URL == nil {
		return "rancher credentials without a url"
	}
	return "rancher token for " + c.URL.Host
}

// GoString is String, so that %#v does not print the token either.
func (c RancherCredentials) GoString() string { return c.String() }

// Cluster returns the credentials Argo CD registers a cluster of the source with: Rancher
// proxies every cluster under its own URL, with the same token and CA.
func (c RancherCredentials) Cluster() ClusterCredentials {
	return ClusterCredentials{Token: c.Token, CACert: c.CACert, Insecure: c.Insecure}
}

// ParseRancherSecret reads a rancher source Secret: url and token (the original operator's two
// keys) are required, caCert and insecure optional. A url that is not absolute http(s) or has
// user information (refused: it would reach every cluster URL), an insecure that is not a
// boolean or a caCert without a PEM certificate is a *SecretKeyError, which never shows the url.
// The url's query and fragment are dropped.
func ParseRancherSecret(data map[string][]byte) (RancherCredentials, error) {
	var c RancherCredentials
	raw := secretValue(data, SecretKeyURL)
	if raw == "" {
		return c, keyError(SecretKeyURL, "is missing or empty")
	}
	// The value is never shown: a malformed url may still hold a token.
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return c, keyError(SecretKeyURL, "is not an absolute http or https URL")
	}
	if u.User != nil {
		// The url becomes every cluster's Argo CD server URL and template variable, and the
		// source's identity: user information in it would travel to all of them.
		return c, keyError(SecretKeyURL, "(%s) has user information; put the API token in key %q", RedactURL(raw), SecretKeyToken)
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v3")
	u.RawQuery, u.Fragment = "", ""
	c.URL = u
	if c.Token = secretValue(data, SecretKeyToken); c.Token == "" {
		return c, keyError(SecretKeyToken, "is missing or empty")
	}
	if c.Insecure, err = parseInsecure(data); err != nil {
		return c, err
	}
	if ca := data[SecretKeyCACert]; len(ca) > 0 {
		if !x509.NewCertPool().AppendCertsFromPEM(ca) {
			return c, keyError(SecretKeyCACert, "holds no PEM certificate")
		}
		c.CACert = ca
	}
	return c, nil
}

func parseInsecure(data map[string][]byte) (bool, error) {
	v := secretValue(data, SecretKeyInsecure)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, keyError(SecretKeyInsecure, "(%q) is not a boolean", v)
	}
	return b, nil
}

// ClusterCredentials are a bearer token and TLS settings Argo CD reaches one cluster with: from
// a rancher source Secret (RancherCredentials.Cluster), or from a cluster credentials Secret
// (ParseClusterSecret). String never shows the token.
type ClusterCredentials struct {
	Token    string
	CACert   []byte
	Insecure bool
}

// String describes the credentials without the token.
func (c ClusterCredentials) String() string { return "cluster bearer token" }

// GoString is String, so that %#v does not print the token either.
func (c ClusterCredentials) GoString() string { return c.String() }

// ParseClusterSecret reads a cluster credentials Secret: the static source's Secret (or a static
// cluster's own secretName) and an OCM cluster's "ocm-<cluster>" Secret. Keys: token (or
// bearerToken), required; caCert (or caData, or ca.crt as the managed-serviceaccount add-on
// names it), an optional PEM CA kept as given; insecure, an optional boolean.
func ParseClusterSecret(data map[string][]byte) (ClusterCredentials, error) {
	var c ClusterCredentials
	c.Token = secretValue(data, SecretKeyToken)
	if c.Token == "" {
		c.Token = secretValue(data, SecretKeyBearerToken)
	}
	if c.Token == "" {
		return c, keyError(SecretKeyToken, "is missing or empty")
	}
	for _, k := range []string{SecretKeyCACert, SecretKeyCAData, SecretKeyCACRT} {
		if ca := data[k]; len(ca) > 0 {
			c.CACert = ca
			break
		}
	}
	var err error
	c.Insecure, err = parseInsecure(data)
	return c, err
}

// EKSCredentials are what an eks source Secret holds. The zero value means the AWS SDK's default
// credential chain (environment, IRSA web identity, EKS Pod Identity, instance role); with
// RoleARN, those credentials assume the role through STS. String never shows the secret parts.
type EKSCredentials struct {
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	RoleARN         string
}

// String describes the credentials without their secrets.
func (c EKSCredentials) String() string {
	src := "default chain"
	if c.AccessKeyID != "" {
		src = "static key " + c.AccessKeyID
	}
	if c.RoleARN != "" {
		src += ", assuming " + c.RoleARN
	}
	return src
}

// GoString is String, so that %#v does not print the secret either.
func (c EKSCredentials) GoString() string { return c.String() }

// Fingerprint identifies the credentials without keeping them readable, so that a client built
// from them can be rebuilt when they change.
func (c EKSCredentials) Fingerprint() string {
	sum := sha256.Sum256([]byte(c.AccessKeyID + "\x00" + c.SecretAccessKey + "\x00" + c.SessionToken + "\x00" + c.RoleARN))
	return hex.EncodeToString(sum[:])
}

// ParseEKSSecret reads an eks source Secret; every key is optional and an empty Secret is the
// default chain. The two access keys come together, a session token needs them, and role_arn
// must be an IAM role ARN. Errors are *SecretKeyError; only the role ARN, which is not a
// secret, is quoted.
func ParseEKSSecret(data map[string][]byte) (EKSCredentials, error) {
	c := EKSCredentials{
		AccessKeyID:     secretValue(data, SecretKeyAWSAccessKeyID),
		SecretAccessKey: secretValue(data, SecretKeyAWSSecretAccessKey),
		SessionToken:    secretValue(data, SecretKeyAWSSessionToken),
		RoleARN:         secretValue(data, SecretKeyAWSRoleARN),
	}
	switch {
	case c.AccessKeyID != "" && c.SecretAccessKey == "":
		return EKSCredentials{}, keyError(SecretKeyAWSAccessKeyID, "is set but %q is missing or empty", SecretKeyAWSSecretAccessKey)
	case c.AccessKeyID == "" && c.SecretAccessKey != "":
		return EKSCredentials{}, keyError(SecretKeyAWSSecretAccessKey, "is set but %q is missing or empty", SecretKeyAWSAccessKeyID)
	case c.SessionToken != "" && c.AccessKeyID == "":
		return EKSCredentials{}, keyError(SecretKeyAWSSessionToken, "needs %q and %q", SecretKeyAWSAccessKeyID, SecretKeyAWSSecretAccessKey)
	}
	if c.RoleARN != "" && !isRoleARN(c.RoleARN) {
		return EKSCredentials{}, keyError(SecretKeyAWSRoleARN, "(%q) is not an IAM role ARN (arn:<partition>:iam::<account>:role/<name>)", c.RoleARN)
	}
	return c, nil
}

func isRoleARN(s string) bool {
	parts := strings.SplitN(s, ":", 6)
	return len(parts) == 6 && parts[0] == "arn" && parts[1] != "" && parts[2] == "iam" &&
		strings.HasPrefix(parts[5], "role/") && len(parts[5]) > len("role/")
}

// GKECredentials are what a gke source Secret holds: a service-account key. The zero value
// means Google application default credentials. String never shows the key.
type GKECredentials struct {
	KeyJSON []byte
	// ProjectID is the key's project_id (the default project when the source names none).
	ProjectID string
}

// String describes the credentials without the key.
func (c GKECredentials) String() string {
	if len(c.KeyJSON) == 0 {
		return "application default credentials"
	}
	return "service-account key of project " + c.ProjectID
}

// GoString is String, so that %#v does not print the key either.
func (c GKECredentials) GoString() string { return c.String() }

// Fingerprint identifies the key without keeping it readable.
func (c GKECredentials) Fingerprint() string {
	sum := sha256.Sum256(c.KeyJSON)
	return hex.EncodeToString(sum[:])
}

// serviceAccountKey is the part of a key file ParseGKESecret checks.
type serviceAccountKey struct {
	Type        string `json:"type"`
	ProjectID   string `json:"project_id"`
	PrivateKey  string `json:"private_key"`
	ClientEmail string `json:"client_email"`
}

// ParseGKESecret reads a gke source Secret: key.json must be a service-account key (type
// "service_account", with client_email and a PEM private_key). Other credential types
// (external_account, authorized_user) are refused: an external-account configuration can make
// the client run commands or call arbitrary URLs. Errors are *SecretKeyError without the key.
func ParseGKESecret(data map[string][]byte) (GKECredentials, error) {
	const key = SecretKeyGCPServiceAccount
	raw := data[key]
	if len(strings.TrimSpace(string(raw))) == 0 {
		return GKECredentials{}, keyError(key, "is missing or empty")
	}
	var k serviceAccountKey
	if err := json.Unmarshal(raw, &k); err != nil {
		return GKECredentials{}, keyError(key, "is not JSON")
	}
	if k.Type != "service_account" {
		return GKECredentials{}, keyError(key, "has type %q, want a service-account key (type \"service_account\")", k.Type)
	}
	if k.ClientEmail == "" {
		return GKECredentials{}, keyError(key, "has no client_email")
	}
	if block, _ := pem.Decode([]byte(k.PrivateKey)); block == nil {
		return GKECredentials{}, keyError(key, "has no PEM private_key")
	}
	return GKECredentials{KeyJSON: append([]byte(nil), raw...), ProjectID: k.ProjectID}, nil
}

// OCMCredentials are what an ocm source Secret holds: the kubeconfig of a remote hub. Without
// the Secret (and without a secretName in the rule) the hub is the scanner's own API server.
type OCMCredentials struct {
	Kubeconfig []byte
}

// String describes the credentials without the kubeconfig.
func (c OCMCredentials) String() string { return "ocm hub kubeconfig" }

// GoString is String, so that %#v does not print the kubeconfig either.
func (c OCMCredentials) GoString() string { return c.String() }

// Fingerprint identifies the kubeconfig without keeping it readable.
func (c OCMCredentials) Fingerprint() string {
	sum := sha256.Sum256(c.Kubeconfig)
	return hex.EncodeToString(sum[:])
}

// ParseOCMSecret reads an ocm source Secret: the key kubeconfig is required. Whether it is a
// usable kubeconfig is for the Kubernetes client to say (the scanner reports it naming the key).
func ParseOCMSecret(data map[string][]byte) (OCMCredentials, error) {
	raw := data[SecretKeyKubeconfig]
	if len(strings.TrimSpace(string(raw))) == 0 {
		return OCMCredentials{}, keyError(SecretKeyKubeconfig, "is missing or empty")
	}
	return OCMCredentials{Kubeconfig: raw}, nil
}

// Keys of an aks source Secret: a Microsoft Entra service principal's client secret, and an
// optional default subscription.
const (
	SecretKeyAzureTenantID       = "tenant_id"
	SecretKeyAzureClientID       = "client_id"
	SecretKeyAzureClientSecret   = "client_secret"
	SecretKeyAzureSubscriptionID = "subscription_id"
)

// AKSCredentials are what an aks source Secret holds. The zero ClientSecret means the ambient
// identity (workload identity, the AZURE_* environment, managed identity). String never shows
// the client secret.
type AKSCredentials struct {
	TenantID     string
	ClientID     string
	ClientSecret string
	// SubscriptionID is the subscription listed when the source names none.
	SubscriptionID string
}

// String describes the credentials without the secret.
func (c AKSCredentials) String() string {
	if c.ClientSecret == "" {
		return "ambient azure identity"
	}
	return "client secret of " + c.ClientID + " in tenant " + c.TenantID
}

// GoString is String, so that %#v does not print the secret either.
func (c AKSCredentials) GoString() string { return c.String() }

// Fingerprint identifies the credentials without keeping them readable.
func (c AKSCredentials) Fingerprint() string {
	sum := sha256.Sum256([]byte(c.TenantID + "\x00" + c.ClientID + "\x00" + c.ClientSecret))
	return hex.EncodeToString(sum[:])
}

// ParseAKSSecret reads an aks source Secret. Every key is optional and an empty Secret is the
// ambient identity; client_secret needs tenant_id and client_id, and those two are only used
// with it. Errors are *SecretKeyError; they quote the tenant and client ids (not secrets), never
// the client secret.
func ParseAKSSecret(data map[string][]byte) (AKSCredentials, error) {
	c := AKSCredentials{
		TenantID:       secretValue(data, SecretKeyAzureTenantID),
		ClientID:       secretValue(data, SecretKeyAzureClientID),
		ClientSecret:   secretValue(data, SecretKeyAzureClientSecret),
		SubscriptionID: secretValue(data, SecretKeyAzureSubscriptionID),
	}
	switch {
	case c.ClientSecret != "" && c.TenantID == "":
		return AKSCredentials{}, keyError(SecretKeyAzureClientSecret, "is set but %q is missing or empty", SecretKeyAzureTenantID)
	case c.ClientSecret != "" && c.ClientID == "":
		return AKSCredentials{}, keyError(SecretKeyAzureClientSecret, "is set but %q is missing or empty", SecretKeyAzureClientID)
	case c.ClientSecret == "" && (c.TenantID != "" || c.ClientID != ""):
		return AKSCredentials{}, keyError(SecretKeyAzureClientSecret, "is missing or empty but %q or %q is set (without a client secret, remove both: the ambient identity is used)", SecretKeyAzureTenantID, SecretKeyAzureClientID)
	}
	if c.TenantID != "" && !azureTenant(c.TenantID) {
		return AKSCredentials{}, keyError(SecretKeyAzureTenantID, "(%q) is not a tenant id or domain", c.TenantID)
	}
	return c, nil
}

// azureTenant accepts what Microsoft Entra takes as a tenant in its token URL: a GUID or a
// domain; anything with a path or query character would change the token request's URL.
func azureTenant(s string) bool {
	for _, r := range s {
		if r != '-' && r != '.' && (r < '0' || r > '9') && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') {
			return false
		}
	}
	return s != ""
}
