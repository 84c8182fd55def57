package testenv

import (
	"context"
	"fmt"
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

// NATSCluster is a cluster of nats-server processes (the standalone binary, as
// StartNATSProcess) routed to each other, JetStream on each: the production topology of the
// bus. Nodes can be killed and restarted on their ports and stores, to test failover.
type NATSCluster struct {
	t     testing.TB
	bin   string
	nodes []*clusterNode
}

// clusterNode is one server of a NATSCluster.
type clusterNode struct {
	args []string
	url  string
	out  *SyncBuffer
	cmd  *exec.Cmd
}

// StartNATSCluster starts size nats-server processes on free ports of 127.0.0.1, named n1, n2,
// ... in the cluster "enforcement", each with JetStream on a store from t.TempDir and routes to
// all the others. It returns once every node accepts clients and the cluster answers
// JetStream requests (it elected its meta leader), or fails the test within 30 seconds. The
// processes are killed when the test ends; their output goes to the test log if it failed.
func StartNATSCluster(t testing.TB, size int) *NATSCluster {
	t.Helper()
	bin, err := NATSServerBinary()
	if err != nil {
		t.Fatalf("nats-server binary: %v", err)
	}
	c := &NATSCluster{t: t, bin: bin}
	var routes []string
	clientAddrs := make([]string, size)
	clusterAddrs := make([]string, size)
	for i := range size {
		clientAddrs[i], clusterAddrs[i] = FreeAddr(t), FreeAddr(t)
		routes = append(routes, "nats://"+clusterAddrs[i])
	}
	for i := range size {
		_, port := splitPort(clientAddrs[i])
		c.nodes = append(c.nodes, &clusterNode{
			args: []string{"-a", "127.0.0.1", "-p", port, "-n", fmt.Sprintf("n%d", i+1), "-js", "-sd", t.TempDir(),
				"--cluster_name", "enforcement", "--cluster", "nats://" + clusterAddrs[i], "--routes", strings.Join(routes, ",")},
			url: "nats://" + clientAddrs[i],
			out: &SyncBuffer{},
		})
	}
	// Registered after the t.TempDir calls, so the processes are gone before their stores.
	t.Cleanup(func() {
		for i, n := range c.nodes {
			n.kill()
			if t.Failed() {
				t.Logf("nats-server n%d output:\n%s", i+1, n.out.String())
			}
		}
	})
	for i := range c.nodes {
		c.Restart(i)
	}
	c.WaitJetStream(30 * time.Second)
	return c
}

// splitPort splits "host:port".
func splitPort(addr string) (host, port string) {
	host, port, _ = strings.Cut(addr, ":")
	return host, port
}

// URL returns the client URLs of every node, comma-separated: a client given it connects to
// any node and fails over to the others.
func (c *NATSCluster) URL() string {
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = n.url
	}
	return strings.Join(urls, ",")
}

// NodeURL returns the client URL of node i (0-based).
func (c *NATSCluster) NodeURL(i int) string { return c.nodes[i].url }

// Kill ends node i with SIGKILL (no goodbye to the cluster, as a crashed or lost machine).
func (c *NATSCluster) Kill(i int) { c.nodes[i].kill() }

// Restart starts node i again (killing it first if it runs) on its ports and store, and waits
// until it accepts clients.
func (c *NATSCluster) Restart(i int) {
	c.t.Helper()
	n := c.nodes[i]
	n.kill()
	n.cmd = exec.Command(c.bin, n.args...)
	n.cmd.Stdout, n.cmd.Stderr = n.out, n.out
	if err := n.cmd.Start(); err != nil {
		c.t.Fatalf("start nats-server n%d: %v", i+1, err)
	}
	deadline := time.Now().Add(natsReadyTimeout)
	for {
		nc, err := nats.Connect(n.url, nats.NoReconnect())
		if err == nil {
			nc.Close()
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("nats-server n%d not ready within %s: %v\n%s", i+1, natsReadyTimeout, err, n.out.String())
		}
		time.Sleep(pollInterval)
	}
}

// WaitJetStream waits until the cluster answers a JetStream request, or fails the test.
func (c *NATSCluster) WaitJetStream(timeout time.Duration) {
	c.t.Helper()
	js := c.JetStream(c.t)
	Eventually(c.t, timeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err
	})
}

// JetStream connects a client to the cluster (any node, failing over) and returns its
// JetStream context. The connection is closed when the test ends.
func (c *NATSCluster) JetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	return connectJetStream(t, c.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond))
}

func (n *clusterNode) kill() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	_ = n.cmd.Wait()
	n.cmd = nil
}
