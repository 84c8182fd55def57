package containers

// TestMain prepares what every test here needs and cannot pull: the product's images (built by
// hack/images.sh, the same script as `make images`) and the fake Rancher's static binary.
//
// Decision: the tests rebuild the images they run (Go's build cache keeps that to seconds once
// warm), so they always test the working tree rather than whatever image was left on the
// machine. ENFORCEMENT_TEST_IMAGES=prebuilt skips the rebuild when iterating on the tests.
//
// Docker missing is a skip on a developer's machine and a failure under CI=true: a suite that
// skips in CI proves nothing.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"testing"

	"github.com/testcontainers/testcontainers-go"
)

// productImages are the images the tests run, as hack/images.sh names them.
var productImages = []string{
	"source-scanner", "rule-engine", "argo-syncer", "trigger-dispatcher", "policy-watcher",
	"enforcement", "nats-server", "etcd", "kube-apiserver",
}

// skipReason is set by TestMain when Docker is unreachable outside CI; every test skips with it.
var skipReason string

// fakeRancherDir is the build context of the fake Rancher image (its binary and Dockerfile).
var fakeRancherDir string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	// No image can be pulled here, and the reaper (Ryuk) is an image: the tests clean up
	// after themselves instead (t.Cleanup on every container, network and volume).
	if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") == "" {
		os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	// The published ports are on this machine when the engine is the local socket; without the
	// override testcontainers sees /.dockerenv (these machines are containers themselves) and
	// dials the bridge gateway instead, which the published ports do not answer on.
	if os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" && strings.HasPrefix(os.Getenv("DOCKER_HOST")+"unix://", "unix://") {
		os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
	}
	inCI := os.Getenv("CI") != "" && os.Getenv("CI") != "false"

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := dockerReachable(ctx)
	cancel()
	if err != nil {
		if inCI {
			fmt.Fprintf(os.Stderr, "FAIL: Docker is unreachable and CI is set, so the container tests cannot be skipped: %v\n", err)
			return 1
		}
		skipReason = fmt.Sprintf("Docker is unreachable (%v); set CI=true to make this a failure", err)
		return m.Run()
	}

	root, err := filepath.Abs("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if os.Getenv("ENFORCEMENT_TEST_IMAGES") != "prebuilt" {
		start := time.Now()
		cmd := exec.Command(filepath.Join(root, "hack", "images.sh"), productImages...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: hack/images.sh: %v\n", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "Built the images in %s\n", time.Since(start).Round(time.Second))
	}

	dir, err := os.MkdirTemp("", "fakerancher-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := buildFakeRancher(dir); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: build the fake Rancher: %v\n", err)
		return 1
	}
	fakeRancherDir = dir
	return m.Run()
}

// dockerReachable pings the Docker engine that testcontainers would use.
func dockerReachable(ctx context.Context) error {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	_, err = cli.Ping(ctx)
	return err
}

// buildFakeRancher compiles ./fakerancher statically into dir and writes the Dockerfile of its
// FROM scratch image next to it.
func buildFakeRancher(dir string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, "fakerancher"), "./fakerancher")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return err
	}
	dockerfile := "FROM scratch\nCOPY fakerancher /fakerancher\nUSER 65532:65532\nEXPOSE 8080 8443\nENTRYPOINT [\"/fakerancher\"]\n"
	return os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644)
}

// requireDocker skips the test when TestMain found no Docker outside CI.
func requireDocker(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}
