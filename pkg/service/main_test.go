package service

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMainExitsWithTheErrorOfRun runs Main in a child process (this test binary again): a run
// that fails ends the process with status 1 and "<name>: <error>" on stderr; a run that returns
// nil ends it with status 0.
func TestMainExitsWithTheErrorOfRun(t *testing.T) {
	if mode := os.Getenv("SERVICE_MAIN_TEST"); mode != "" {
		Main("demo-service", func(_ context.Context, getenv Getenv, _, _ io.Writer) error {
			if mode == "fail" {
				return errors.New("configuration: " + getenv("SERVICE_MAIN_TEST"))
			}
			return nil
		})
		os.Exit(0)
	}
	for _, mode := range []string{"fail", "ok"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMainExitsWithTheErrorOfRun$")
		cmd.Env = append(os.Environ(), "SERVICE_MAIN_TEST="+mode)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		switch mode {
		case "fail":
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("failing run: %v, want exit status 1", err)
			}
			if !strings.Contains(stderr.String(), "demo-service: configuration: fail") {
				t.Errorf("failing run printed %q, want the service name and the error", stderr.String())
			}
		case "ok":
			if err != nil {
				t.Fatalf("run returning nil: %v (%s), want exit status 0", err, stderr.String())
			}
		}
	}
}
