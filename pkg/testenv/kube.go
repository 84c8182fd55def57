package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

const (
	// kubeStartTimeout bounds the start of etcd and kube-apiserver each. envtest's default of
	// 20 s is too short on a two-core machine that is also compiling.
	kubeStartTimeout = 60 * time.Second
	// crdWaitTimeout bounds how long InstallCRDs waits for new CRDs to be served.
	crdWaitTimeout = 30 * time.Second
)

// Kube is a running kube-apiserver backed by its own etcd, started by StartKube, NewKube or
// SharedKube. There are no controllers: nothing schedules pods, garbage-collects owned objects,
// or finishes deleting namespaces or objects with finalizers.
type Kube struct {
	// Config connects as a member of system:masters (client certificate).
	Config *rest.Config
	// Client is a controller-runtime client for Config using Scheme.
	Client client.Client
	// Scheme holds the client-go built-in types and apiextensions/v1, or the scheme given
	// with WithScheme. Custom resources work with unstructured objects in any case.
	Scheme *runtime.Scheme
	// Kubeconfig is the path of a kubeconfig file for Config, for child processes (KUBECONFIG)
	// and kubectl. It is removed when the server stops.
	Kubeconfig string

	env    *envtest.Environment
	tmpDir string
}

// KubeOption configures StartKube and NewKube.
type KubeOption func(*kubeSettings)

type kubeSettings struct {
	scheme *runtime.Scheme
	crds   []*apiextensionsv1.CustomResourceDefinition
}

// WithScheme makes Kube.Client use scheme, for example one that also holds the project's own
// API types. The scheme must include the built-in types the test uses (clientgoscheme).
func WithScheme(scheme *runtime.Scheme) KubeOption {
	return func(s *kubeSettings) { s.scheme = scheme }
}

// WithCRDs installs crds while the server starts and waits until they are served, like
// InstallCRDs.
func WithCRDs(crds ...*apiextensionsv1.CustomResourceDefinition) KubeOption {
	return func(s *kubeSettings) { s.crds = append(s.crds, crds...) }
}

// StartKube starts etcd and kube-apiserver through envtest and stops them when the test and its
// subtests finish. Starting costs a few seconds; a package with many such tests should share
// one server with SharedKube. The binaries come from $KUBEBUILDER_ASSETS if set, else from
// hack/build-tools.sh (which builds them on first use). It fails the test if the binaries cannot
// be found or built, the server does not start within a minute, or a WithCRDs CRD is rejected.
// Set KUBEBUILDER_ATTACH_CONTROL_PLANE_OUTPUT=true to see the etcd and kube-apiserver output.
func StartKube(t testing.TB, opts ...KubeOption) *Kube {
	t.Helper()
	k, err := NewKube(opts...)
	if err != nil {
		t.Fatalf("start kube-apiserver: %v", err)
	}
	t.Cleanup(func() {
		if err := k.Stop(); err != nil {
			t.Errorf("stop kube-apiserver: %v", err)
		}
	})
	return k
}

// NewKube starts etcd and kube-apiserver like StartKube, for callers without a testing.TB (such
// as TestMain). The caller must call Stop, or the two processes outlive the test binary.
func NewKube(opts ...KubeOption) (*Kube, error) {
	var settings kubeSettings
	for _, opt := range opts {
		opt(&settings)
	}
	if settings.scheme == nil {
		settings.scheme = runtime.NewScheme()
		if err := clientgoscheme.AddToScheme(settings.scheme); err != nil {
			return nil, err
		}
		if err := apiextensionsv1.AddToScheme(settings.scheme); err != nil {
			return nil, err
		}
	}
	assets, err := kubeAssets()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		Scheme:                   settings.scheme,
		CRDs:                     deepCopyCRDs(settings.crds),
		ControlPlaneStartTimeout: kubeStartTimeout,
		CRDInstallOptions:        envtest.CRDInstallOptions{MaxTime: crdWaitTimeout},
	}
	cfg, err := env.Start()
	if err != nil {
		// Start may fail after the processes are up (for example on a bad CRD).
		return nil, errors.Join(err, env.Stop())
	}
	k := &Kube{Config: cfg, Scheme: settings.scheme, env: env}
	if err := k.init(); err != nil {
		return nil, errors.Join(err, k.Stop())
	}
	return k, nil
}

// init creates the client and writes the kubeconfig file.
func (k *Kube) init() error {
	c, err := client.New(k.Config, client.Options{Scheme: k.Scheme})
	if err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	k.Client = c
	// A second system:masters user, because envtest only renders kubeconfigs for users it adds.
	user, err := k.env.AddUser(envtest.User{Name: "testenv", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("add kubeconfig user: %w", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("render kubeconfig: %w", err)
	}
	if k.tmpDir, err = os.MkdirTemp("", "testenv-kube-"); err != nil {
		return err
	}
	k.Kubeconfig = filepath.Join(k.tmpDir, "kubeconfig")
	return os.WriteFile(k.Kubeconfig, kubeconfig, 0o600)
}

// Stop stops kube-apiserver and etcd (deleting etcd's data) and removes the kubeconfig file.
// StartKube and RunWithSharedKube call it; call it yourself only after NewKube.
func (k *Kube) Stop() error {
	err := k.env.Stop()
	if k.tmpDir != "" {
		err = errors.Join(err, os.RemoveAll(k.tmpDir))
	}
	return err
}

// InstallCRDs creates the CRDs, or updates them if they exist, and waits until the API server
// serves their resources. It is idempotent, so tests sharing a server may each install what they
// need. The arguments are not modified. It fails the test when no CRD is given, the API server
// rejects one, or one is not served within 30 seconds.
func (k *Kube) InstallCRDs(t testing.TB, crds ...*apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	if len(crds) == 0 {
		t.Fatal("install CRDs: none given")
	}
	_, err := envtest.InstallCRDs(k.Config, envtest.CRDInstallOptions{
		CRDs:    deepCopyCRDs(crds),
		MaxTime: crdWaitTimeout,
	})
	if err != nil {
		t.Fatalf("install CRDs: %v", err)
	}
}

// InstallCRDsFromDir installs every CRD found in the .yaml, .yml and .json files directly in
// dir (not in subdirectories), like InstallCRDs; documents of other kinds are ignored. It fails
// the test when dir does not exist or holds no CRD.
func (k *Kube) InstallCRDsFromDir(t testing.TB, dir string) {
	t.Helper()
	installed, err := envtest.InstallCRDs(k.Config, envtest.CRDInstallOptions{
		Paths:              []string{dir},
		ErrorIfPathMissing: true,
		MaxTime:            crdWaitTimeout,
	})
	if err != nil {
		t.Fatalf("install CRDs from %s: %v", dir, err)
	}
	if len(installed) == 0 {
		t.Fatalf("install CRDs from %s: no CustomResourceDefinition found", dir)
	}
}

// Namespace creates the namespace name if it does not exist yet and returns name. The namespace
// is not deleted afterwards: without a namespace controller the deletion would never finish, so
// tests sharing a server should use distinct names. It fails the test if the create fails for
// any reason other than the namespace existing.
func (k *Kube) Namespace(t testing.TB, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k.Client.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

// User writes a kubeconfig for a new user of the API server, name in groups, authenticated by a
// client certificate, and returns its path. The user has no permission until the test grants one
// (a RoleBinding to its name); unlike the system:masters users of Config and Kubeconfig, the API
// server's Priority and Fairness treats it as any client (the exempt level is for masters).
func (k *Kube) User(t testing.TB, name string, groups ...string) string {
	t.Helper()
	user, err := k.env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		t.Fatalf("add user %s: %v", name, err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		t.Fatalf("render the kubeconfig of %s: %v", name, err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// shared is the per-process API server behind SharedKube.
var shared struct {
	sync.Mutex
	enabled bool // set by RunWithSharedKube, which stops the server at the end
	kube    *Kube
	err     error // a failed start is not retried
}

// RunWithSharedKube runs the package's tests, as TestMain does with m.Run, and afterwards stops
// the API server that SharedKube may have started. It returns m.Run's exit code, or 1 if the
// server failed to stop. Use it as
//
//	func TestMain(m *testing.M) { os.Exit(testenv.RunWithSharedKube(m)) }
func RunWithSharedKube(m *testing.M) int {
	shared.Lock()
	shared.enabled = true
	shared.Unlock()

	code := m.Run()

	shared.Lock()
	defer shared.Unlock()
	if shared.kube != nil {
		if err := shared.kube.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: stop shared kube-apiserver: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
		shared.kube = nil
	}
	return code
}

// SharedKube returns the API server shared by all tests of the package, starting it on first
// use (as StartKube does, with default options). Tests should install the CRDs they need with
// InstallCRDs (idempotent) and work in their own namespaces, since state persists between tests.
// It fails the test when TestMain does not use RunWithSharedKube (the server would otherwise
// outlive the test binary) or when the server failed to start, now or on an earlier call.
func SharedKube(t testing.TB) *Kube {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	if !shared.enabled {
		t.Fatal("SharedKube needs TestMain to call testenv.RunWithSharedKube(m)")
	}
	if shared.kube == nil && shared.err == nil {
		shared.kube, shared.err = NewKube()
	}
	if shared.err != nil {
		t.Fatalf("start shared kube-apiserver: %v", shared.err)
	}
	return shared.kube
}
