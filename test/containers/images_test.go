package containers

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// TestImagesAreStaticNonRootAndLabelled inspects every image hack/images.sh builds, as shipped:
// a non-root user, the OCI version and revision labels, ZONEINFO pointing at Go's time zone
// database, and the CA bundle and that database really inside (copied out of a container).
func TestImagesAreStaticNonRootAndLabelled(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for _, name := range productImages {
		t.Run(name, func(t *testing.T) {
			ref := "enforcement/" + name + ":dev"
			img, err := cli.ImageInspect(ctx, ref)
			if err != nil {
				t.Fatalf("inspect %s: %v", ref, err)
			}
			if img.Config == nil {
				t.Fatalf("%s has no config", ref)
			}
			if img.Config.User != "65532:65532" {
				t.Errorf("%s runs as %q, want the non-root 65532:65532", ref, img.Config.User)
			}
			for _, label := range []string{"org.opencontainers.image.version", "org.opencontainers.image.revision", "org.opencontainers.image.title"} {
				if img.Config.Labels[label] == "" {
					t.Errorf("%s lacks the label %s", ref, label)
				}
			}
			if !slices.Contains(img.Config.Env, "ZONEINFO=/usr/share/zoneinfo.zip") {
				t.Errorf("%s env %v lacks ZONEINFO", ref, img.Config.Env)
			}
			c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
				ContainerRequest: testcontainers.ContainerRequest{Image: ref}, Started: false})
			if dc, ok := c.(*testcontainers.DockerContainer); ok && dc != nil {
				testcontainers.CleanupContainer(t, dc)
			}
			if err != nil {
				t.Fatalf("create a container of %s: %v", ref, err)
			}
			for _, path := range []string{"/etc/ssl/certs/ca-certificates.crt", "/usr/share/zoneinfo.zip", "/etc/passwd"} {
				r, err := c.CopyFileFromContainer(ctx, path)
				if err != nil {
					t.Errorf("%s: %s: %v", ref, path, err)
					continue
				}
				b, _ := io.ReadAll(r)
				r.Close()
				if len(b) == 0 {
					t.Errorf("%s: %s is empty", ref, path)
				}
			}
		})
	}
}

// TestPolicyWatcherImageRefusesBadConfiguration runs the policy-watcher image (it runs on
// managed clusters, so no scenario here starts it): the static binary starts FROM scratch and
// a bad setting ends it at once with an error naming the variable.
func TestPolicyWatcherImageRefusesBadConfiguration(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:      "enforcement/policy-watcher:dev",
			Env:        map[string]string{"POLL_INTERVAL_SEC": "soon"},
			WaitingFor: wait.ForExit().WithExitTimeout(time.Minute),
		},
		Started: true,
	})
	if dc, ok := c.(*testcontainers.DockerContainer); ok && dc != nil {
		testcontainers.CleanupContainer(t, dc)
	}
	if err != nil {
		t.Fatal(err)
	}
	state, err := c.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	logs := logsOf(c.(*testcontainers.DockerContainer))
	if state.ExitCode == 0 || !strings.Contains(logs, "POLL_INTERVAL_SEC") {
		t.Errorf("exit code %d, output %q: want a non-zero exit naming POLL_INTERVAL_SEC", state.ExitCode, logs)
	}
}
