package testenv

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSProcess is a nats-server with JetStream running as a separate process, from the standalone
// binary that NATSServerBinary provides (the same version as the embedded server). Tests whose
// services all run as built binaries use it, so the bus runs as it does in a deployment and
// the test binary holds only the test's own code: the race detector then reports races of
// Enforcement's code, not the server's.
type NATSProcess struct {
	url string
}

// StartNATSProcess starts a nats-server process with JetStream on a free port of 127.0.0.1,
// storing its data in a directory from t.TempDir. Its output goes to the test log when the test
// fails. The process is killed when the test ends. It fails the test if the binary cannot be
// built or the server does not accept connections within 10 seconds.
func StartNATSProcess(t testing.TB) *NATSProcess {
	t.Helper()
	bin, err := NATSServerBinary()
	if err != nil {
		t.Fatalf("nats-server binary: %v", err)
	}
	addr := FreeAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	out := &SyncBuffer{}
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", port, "-js", "-sd", t.TempDir())
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	// Registered after t.TempDir, so the process is gone before its store is removed.
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("nats-server output:\n%s", out.String())
		}
	})
	p := &NATSProcess{url: "nats://" + addr}
	deadline := time.Now().Add(natsReadyTimeout)
	for {
		nc, err := nats.Connect(p.url, nats.NoReconnect())
		if err == nil {
			nc.Close()
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server process not ready within %s: %v\n%s", natsReadyTimeout, err, out.String())
		}
		time.Sleep(pollInterval)
	}
}

// URL returns the client URL, nats://127.0.0.1:<port>.
func (p *NATSProcess) URL() string {
	return p.url
}

// JetStream connects a client to the server and returns its JetStream context. The connection
// is closed when the test ends.
func (p *NATSProcess) JetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	return connectJetStream(t, p.url)
}
