package testenv

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// FreeAddr returns a 127.0.0.1 address whose port was free a moment ago, for a service's
// METRICS_ADDR or HEALTH_ADDR; see PickFreeAddr. It fails the test when none is found.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := PickFreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// PickFreeAddr returns a 127.0.0.1 address whose port was free a moment ago. It never returns
// an address twice in one process: a caller that picks several addresses before it starts
// anything would otherwise be given a port again once its probe closed. The port is drawn
// below the kernel's ephemeral range (freePortRange): a port the kernel handed out for a
// listener on port 0 is one it also hands out as the local port of an outgoing connection, and
// the many connections a test or the local mode makes (to its API server, to NATS) took such a
// port between the probe and the service's listen now and then. Another process may still take
// the port before it is bound; a server started on it then fails loudly, it does not hang.
func PickFreeAddr() (string, error) {
	low, high := freePortRange()
	for range 1000 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(low+rand.IntN(high-low)))
		if _, given := freeAddrsGiven.Load(addr); given {
			continue
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken
		}
		ln.Close()
		if _, given := freeAddrsGiven.LoadOrStore(addr, true); !given {
			return addr, nil
		}
	}
	return "", fmt.Errorf("find a free port: 1,000 tries in [%d, %d) found none free and not handed out already", low, high)
}

// freePortRange is where FreeAddr draws its ports: [10000, the first ephemeral port), from
// /proc/sys/net/ipv4/ip_local_port_range (Linux's default range begins at 32768, used when
// the file cannot be read), or [10000, 30000) when the ephemeral range begins too low to leave
// room below it. Read once.
var freePortRange = sync.OnceValues(func() (low, high int) {
	low, high = 10000, 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if fields := strings.Fields(string(b)); len(fields) == 2 {
			if first, err := strconv.Atoi(fields[0]); err == nil {
				high = first
			}
		}
	}
	if high-low < 5000 {
		high = 30000
	}
	return low, high
})

// freeAddrsGiven holds every address FreeAddr returned in this process.
var freeAddrsGiven sync.Map

// pollInterval is how often Eventually retries.
const pollInterval = 50 * time.Millisecond

// Eventually calls check every 50 ms until it returns nil, and fails the test with check's last
// error once timeout has passed. check should describe what it waits for in its error, so that
// a timeout says what was missing ("application x not created yet").
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not met within %s: %v", timeout, err)
		}
		time.Sleep(pollInterval)
	}
}

// EventuallyTrue is Eventually for a condition without an error: it fails the test with "timed
// out after <timeout> waiting until <what>".
func EventuallyTrue(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", timeout, what)
		}
		time.Sleep(pollInterval)
	}
}

// SyncBuffer collects the output of a service or a process: Write and String are safe to call
// from different goroutines, so a test can read the logs while the service still writes them.
// The zero value is ready to use.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p; it never fails.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// JetStream connects a client to the server with opts (a user, say, on a server
// WithAuthorization) and returns its JetStream context. The connection is closed when the test
// ends.
func (n *NATS) JetStream(t testing.TB, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	return connectJetStream(t, n.URL(), opts...)
}

// connectJetStream connects a client to url with opts and returns its JetStream context. The
// connection is closed when the test ends.
func connectJetStream(t testing.TB, url string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect to NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return js
}
