package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// TestMissingToolsAsksTheBuildScript runs hack/build-tools.sh --missing against an empty tool
// cache (everything is missing, nothing is built) and checks KUBEBUILDER_ASSETS short-cuts it.
func TestMissingToolsAsksTheBuildScript(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	t.Setenv("ENFORCEMENT_TOOLS_CACHE", cache)
	missing, err := missingTools(context.Background(), root, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range missing {
		if m.version == "" || m.module == "" {
			t.Errorf("tool %+v lacks its version or module", m)
		}
		names = append(names, m.name)
	}
	if got := strings.Join(names, ","); got != "etcd,kube-apiserver,nats-server" {
		t.Errorf("missing tools %q, want etcd,kube-apiserver,nats-server", got)
	}
	if entries, _ := os.ReadDir(cache); len(entries) != 0 {
		t.Errorf("--missing wrote into the cache: %v", entries)
	}
	withAssets := func(k string) string {
		if k == "KUBEBUILDER_ASSETS" {
			return "/somewhere"
		}
		return ""
	}
	if missing, err := missingTools(context.Background(), root, withAssets); err != nil || missing != nil {
		t.Errorf("with KUBEBUILDER_ASSETS: %v, %v; want nothing missing", missing, err)
	}
}

// TestBuildNoticeSaysWhatAndHowLong checks the notice's tools and its estimate with and without
// the modules in the module cache.
func TestBuildNoticeSaysWhatAndHowLong(t *testing.T) {
	kube := tool{name: "kube-apiserver", version: "v1.31.14", module: "k8s.io/kubernetes"}
	etcd := tool{name: "etcd", version: "v3.5.35", module: "go.etcd.io/etcd/server/v3"}
	modcache := t.TempDir()
	cold := buildNotice([]tool{etcd, kube}, modcache)
	for _, want := range []string{"etcd v3.5.35, kube-apiserver v1.31.14", "about 12.5 minutes with an empty Go module cache"} {
		if !strings.Contains(cold, want) {
			t.Errorf("notice %q lacks %q", cold, want)
		}
	}
	for _, m := range []tool{kube, etcd} {
		zip := filepath.Join(modcache, "cache", "download", m.module, "@v", m.version+".zip")
		if err := os.MkdirAll(filepath.Dir(zip), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(zip, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if warm := buildNotice([]tool{etcd, kube}, modcache); !strings.Contains(warm, "about 4 minutes, the modules are already downloaded") {
		t.Errorf("notice with downloaded modules: %q", warm)
	}
	if small := buildNotice([]tool{etcd}, ""); !strings.Contains(small, "about a minute") || strings.Contains(small, "kube-apiserver") {
		t.Errorf("notice for etcd alone: %q", small)
	}
	if got := escapeModulePath("github.com/BurntSushi/toml"); got != "github.com/!burnt!sushi/toml" {
		t.Errorf("escapeModulePath = %q", got)
	}
}

// TestControllerRuntimeLogGoesToStderr checks that controller-runtime's logger is set before any
// command runs (so it never prints its "was never called" stack trace) and that its errors reach
// the command's stderr while its progress lines do not.
func TestControllerRuntimeLogGoesToStderr(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"help"}, func(string) string { return "" }, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	ctrllog.Log.WithName("envtest").Error(errors.New("boom"), "Failed to install CRDs")
	ctrllog.Log.Info("Installing CRDs")
	if got := stderr.String(); !strings.Contains(got, "Failed to install CRDs") || !strings.Contains(got, "boom") {
		t.Errorf("controller-runtime's error did not reach stderr: %q", got)
	}
	if strings.Contains(stderr.String(), "Installing CRDs") {
		t.Errorf("controller-runtime's progress line reached stderr: %q", stderr.String())
	}
}
