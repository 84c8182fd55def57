package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// tool is one control plane binary that hack/build-tools.sh has not built yet.
type tool struct {
	name, version, module string
}

// missingTools asks hack/build-tools.sh which of etcd, kube-apiserver and nats-server it would
// have to compile (its --missing mode builds nothing). With KUBEBUILDER_ASSETS set the test
// harness uses those binaries, so nothing is missing.
func missingTools(ctx context.Context, root string, getenv func(string) string) ([]tool, error) {
	if getenv("KUBEBUILDER_ASSETS") != "" {
		return nil, nil
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "hack", "build-tools.sh"), "--missing")
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("ask hack/build-tools.sh which tools are missing: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var tools []tool
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			return nil, fmt.Errorf("ask hack/build-tools.sh which tools are missing: unexpected line %q", line)
		}
		tools = append(tools, tool{name: f[0], version: f[1], module: f[2]})
	}
	return tools, nil
}

// buildNotice is the line the local mode prints before the harness compiles the missing tools:
// what it builds and roughly how long that takes, from the times the README quotes (measured on
// two cores). The duration depends on whether the tools' modules are already in the Go module
// cache (modcache, "" when unknown).
func buildNotice(missing []tool, modcache string) string {
	names := make([]string, len(missing))
	slowest := false
	downloaded := modcache != ""
	for i, t := range missing {
		names[i] = t.name + " " + t.version
		if t.name == "kube-apiserver" {
			slowest = true
		}
		if downloaded && !moduleDownloaded(modcache, t.module, t.version) {
			downloaded = false
		}
	}
	var took string
	switch {
	case !slowest:
		took = "about a minute"
	case downloaded:
		took = "about 4 minutes, the modules are already downloaded"
	default:
		took = "about 12.5 minutes with an empty Go module cache, about 4 once the modules are downloaded"
	}
	return fmt.Sprintf("Building the control plane tools from Go modules, once: %s (%s; cached afterwards, later runs start at once)",
		strings.Join(names, ", "), took)
}

// moduleDownloaded reports whether the Go module cache holds the zip of module@version.
func moduleDownloaded(modcache, module, version string) bool {
	_, err := os.Stat(filepath.Join(modcache, "cache", "download", escapeModulePath(module), "@v", version+".zip"))
	return err == nil
}

// escapeModulePath is the module cache's case encoding: every upper-case letter becomes "!"
// followed by its lower-case form.
func escapeModulePath(p string) string {
	var b strings.Builder
	for _, r := range p {
		if r >= 'A' && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// goModCache returns the Go module cache directory, or "" when go cannot say.
func goModCache(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMODCACHE").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
