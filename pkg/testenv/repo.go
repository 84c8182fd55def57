package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// RepoRoot returns the repository root: the nearest directory at or above the working
// directory that contains go.work. Tests run in their package directory, so this finds the
// workspace root from any module. It fails when no go.work exists above the working directory
// (for example a test binary copied elsewhere).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repository root: no go.work above the working directory")
		}
		dir = parent
	}
}

// buildTools runs hack/build-tools.sh once per process and remembers the envtest asset
// directory it prints. A warm cache makes this instant; a cold one compiles etcd,
// kube-apiserver and nats-server, which takes minutes (the script reports progress on stderr).
var buildTools = sync.OnceValues(func() (string, error) { return runBuildTools() })

// buildToolsWithArgoCD is buildTools that also builds argocd-server (--with argocd-server).
var buildToolsWithArgoCD = sync.OnceValues(func() (string, error) {
	return runBuildTools("--with", "argocd-server")
})

// runBuildTools runs hack/build-tools.sh with args and returns the envtest asset directory it
// prints last.
func runBuildTools(args ...string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	var stdout bytes.Buffer
	cmd := exec.Command("bash", append([]string{filepath.Join(root, "hack", "build-tools.sh")}, args...)...)
	cmd.Dir = root
	cmd.Stdout = &stdout
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("run %s: %w", strings.Join(append([]string{"hack/build-tools.sh"}, args...), " "), err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	assets := strings.TrimSpace(lines[len(lines)-1])
	if assets == "" {
		return "", errors.New("run hack/build-tools.sh: it printed no asset directory")
	}
	return assets, nil
}

// kubeAssets returns the directory holding the etcd and kube-apiserver binaries:
// $KUBEBUILDER_ASSETS when set, else the directory hack/build-tools.sh builds.
func kubeAssets() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	return buildTools()
}

// NATSServerBinary returns the path of the standalone nats-server binary (the version pinned in
// tools/nats-server), for tests that need NATS in a separate process or a container image. It
// runs hack/build-tools.sh, which builds the binary on first use (minutes) and links it as
// <tools cache>/nats-server. It fails when the script fails or the binary is missing.
func NATSServerBinary() (string, error) {
	assets, err := buildTools()
	if err != nil {
		return "", err
	}
	// build-tools.sh puts the envtest assets and the nats-server link side by side in its cache.
	bin := filepath.Join(filepath.Dir(assets), "nats-server")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("find nats-server binary: %w", err)
	}
	return bin, nil
}
