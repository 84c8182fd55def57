package main

// compose-init prepares the docker compose demo (deploy/compose) in two one-shot steps:
//
//	enforcement compose-init pki   before kube-apiserver starts: a CA, the API server's serving
//	                               certificate, the service-account key pair, a static token and
//	                               the kubeconfig files, written into the shared volume
//	enforcement compose-init seed  once the API server answers: every CRD, then the demo
//
// Decision: the API server authenticates the demo's clients with a static token file rather than
// client certificates. One token in one kubeconfig is all the services need, and it is the
// smallest set of files that a kube-apiserver with RBAC, service accounts and TLS accepts.
// The files are kept across restarts (a persistent volume), so certificates change only after
// `docker-compose down -v`; only the kubeconfig files are rewritten, since the host port may change.
//
// Both steps wait by retrying with a deadline, never by sleeping a fixed time.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// Files of the shared volume. kube-apiserver reads the first six; the services read kubeconfig.
const (
	caCertFile      = "ca.crt"
	caKeyFile       = "ca.key"
	servingCertFile = "apiserver.crt"
	servingKeyFile  = "apiserver.key"
	saKeyFile       = "sa.key"
	saPubFile       = "sa.pub"
	tokenFile       = "tokens.csv"
	kubeconfigFile  = "kubeconfig"      // for containers: the API server by its service name
	hostKubeconfig  = "kubeconfig.host" // for the host: the API server's published port
)

// demoUser is the one identity of the demo. It is in system:masters: the demo is a development
// sandbox, and the services' real permissions are the Helm charts' RBAC, tested there.
const demoUser = "enforcement-demo"

// Defaults of the compose file; each is overridable by the named variable.
const (
	defaultSharedDir   = "/shared"                     // SHARED_DIR
	defaultAPIURL      = "https://kube-apiserver:6443" // KUBE_API_URL
	defaultHostAPIURL  = "https://127.0.0.1:6443"      // KUBE_API_HOST_URL
	defaultCRDDir      = "/crds"                       // CRD_DIR
	defaultSeedTimeout = 3 * time.Minute               // SEED_TIMEOUT
)

const composeInitUsage = `usage:
  enforcement compose-init pki    write CA, serving certificate, service-account keys, token and kubeconfigs
                                  (SHARED_DIR, KUBE_API_URL, KUBE_API_HOST_URL)
  enforcement compose-init seed   install the CRDs and seed the demo (KUBECONFIG, CRD_DIR, SEED_TIMEOUT)`

func runComposeInit(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	// controller-runtime's client logs nothing we need, and complains when no logger is set.
	ctrllog.SetLogger(logr.Discard())
	if len(args) != 1 {
		return fmt.Errorf("compose-init: want one step\n%s", composeInitUsage)
	}
	switch args[0] {
	case "pki":
		return writePKI(valueOr(getenv("SHARED_DIR"), defaultSharedDir),
			valueOr(getenv("KUBE_API_URL"), defaultAPIURL), valueOr(getenv("KUBE_API_HOST_URL"), defaultHostAPIURL), stdout)
	case "seed":
		timeout := defaultSeedTimeout
		if v := getenv("SEED_TIMEOUT"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fmt.Errorf("SEED_TIMEOUT=%q: want a positive duration such as 3m", v)
			}
			timeout = d
		}
		kubeconfig := getenv("KUBECONFIG")
		if kubeconfig == "" {
			return errors.New("KUBECONFIG: required")
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return seed(ctx, kubeconfig, valueOr(getenv("CRD_DIR"), defaultCRDDir), stdout)
	}
	return fmt.Errorf("compose-init: unknown step %q\n%s", args[0], composeInitUsage)
}

// writePKI writes the shared files into dir, keeping the keys, certificates and token of an
// earlier run and rewriting the two kubeconfig files.
func writePKI(dir, apiURL, hostAPIURL string, stdout io.Writer) error {
	if _, err := os.Stat(filepath.Join(dir, tokenFile)); errors.Is(err, os.ErrNotExist) {
		if err := generatePKI(dir, apiURL, hostAPIURL); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Generated the CA, the API server certificate, service-account keys and a token in %s\n", dir)
	} else if err != nil {
		return err
	} else {
		fmt.Fprintf(stdout, "Kept the certificates and token of an earlier run in %s\n", dir)
	}
	ca, err := os.ReadFile(filepath.Join(dir, caCertFile))
	if err != nil {
		return err
	}
	token, err := readToken(filepath.Join(dir, tokenFile))
	if err != nil {
		return err
	}
	for file, server := range map[string]string{kubeconfigFile: apiURL, hostKubeconfig: hostAPIURL} {
		if err := writeKubeconfig(filepath.Join(dir, file), server, ca, token); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "Wrote %s (server %s) and %s (server %s)\n",
		filepath.Join(dir, kubeconfigFile), apiURL, filepath.Join(dir, hostKubeconfig), hostAPIURL)
	return nil
}

func generatePKI(dir, apiURL, hostAPIURL string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "enforcement-demo-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("create CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}

	servingKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	servingTemplate := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		// The names containers, the host and in-cluster clients use; 10.0.0.1 is the first
		// address of the compose file's --service-cluster-ip-range (the kubernetes Service).
		DNSNames: []string{"kube-apiserver", "localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
	}
	for _, raw := range []string{apiURL, hostAPIURL} {
		addServerName(servingTemplate, raw)
	}
	servingDER, err := x509.CreateCertificate(rand.Reader, servingTemplate, caCert, &servingKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("create serving certificate: %w", err)
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	tokenBytes := make([]byte, 32)
	if _, err := rand.Read(tokenBytes); err != nil {
		return err
	}
	// Static token file format: token,user,uid,"group1,group2".
	tokens := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", hex.EncodeToString(tokenBytes), demoUser, demoUser)

	files := []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{caCertFile, pemBlock("CERTIFICATE", caDER), 0o644},
		{caKeyFile, ecKeyPEM(caKey), 0o600},
		{servingCertFile, pemBlock("CERTIFICATE", servingDER), 0o644},
		{servingKeyFile, ecKeyPEM(servingKey), 0o600},
		{saKeyFile, ecKeyPEM(saKey), 0o600},
		{saPubFile, pemBlock("PUBLIC KEY", saPub), 0o644},
		{tokenFile, []byte(tokens), 0o600}, // last: its presence marks a complete set
	}
	for _, f := range files {
		if err := writeFileAtomic(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}

// addServerName adds the host of the URL raw to the certificate's names, unless already there.
func addServerName(cert *x509.Certificate, raw string) {
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); ip != nil {
		for _, have := range cert.IPAddresses {
			if have.Equal(ip) {
				return
			}
		}
		cert.IPAddresses = append(cert.IPAddresses, ip)
		return
	}
	for _, have := range cert.DNSNames {
		if have == host {
			return
		}
	}
	cert.DNSNames = append(cert.DNSNames, host)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}

func ecKeyPEM(key *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		panic(err) // only fails for curves Go does not know
	}
	return pemBlock("EC PRIVATE KEY", der)
}

// readToken returns the token of the first line of a static token file.
func readToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for i, c := range data {
		if c == ',' {
			return string(data[:i]), nil
		}
	}
	return "", fmt.Errorf("%s: no token", path)
}

func writeKubeconfig(path, server string, ca []byte, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["enforcement-demo"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[demoUser] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["enforcement-demo"] = &clientcmdapi.Context{Cluster: "enforcement-demo", AuthInfo: demoUser}
	cfg.CurrentContext = "enforcement-demo"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, data, 0o600)
}

// writeFileAtomic writes through a temporary file and a rename, so that a reader never sees half
// a file and an interrupted run leaves no partial set behind.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// seed waits for the API server, installs the ClusterRule CRD from crdDir and the embedded Argo
// CD and OCM CRDs, and creates the demo, retrying each step until ctx ends. Every step is
// idempotent, so a second `up` on the same volumes seeds nothing twice.
func seed(ctx context.Context, kubeconfig, crdDir string, stdout io.Writer) error {
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(stdout, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("KUBECONFIG=%s: %w", kubeconfig, err)
	}
	say("Waiting for the Kubernetes API at %s", cfg.Host)
	if err := retry(ctx, func() error { return apiReady(ctx, cfg) }); err != nil {
		return fmt.Errorf("wait for the Kubernetes API at %s: %w", cfg.Host, err)
	}
	say("Kubernetes API ready after %s", time.Since(start).Round(100*time.Millisecond))
	if err := retry(ctx, func() error {
		_, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
			Paths:              []string{crdDir},
			ErrorIfPathMissing: true,
			CRDs:               append(testenv.ArgoCDCRDs(), testenv.OCMCRDs()...),
			MaxTime:            time.Minute,
		})
		return err
	}); err != nil {
		return fmt.Errorf("install CRDs: %w", err)
	}
	say("Installed CRDs: ClusterRule, Argo CD Application/AppProject/ApplicationSet, OCM ClusterClaim/ManagedCluster/Policy")
	if err := retry(ctx, func() error { return seedDemo(ctx, cfg) }); err != nil {
		return fmt.Errorf("seed demo: %w", err)
	}
	say("Seeded the demo: ConfigMap %s/%s (3 clusters), Secret %s/%s and ClusterRule %s/demo", localOperatorNamespace, staticConfigMap, localOperatorNamespace, demoSecret, localOperatorNamespace)
	return nil
}

// apiReady is nil once the API server's /readyz answers ok.
func apiReady(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	_, err = cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err
}

// retry calls f until it returns nil, waiting 250 ms after the first failure and doubling up to
// 2 s, and returns the last error when ctx ends first.
func retry(ctx context.Context, f func() error) error {
	wait := 250 * time.Millisecond
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (gave up: %w)", err, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}
