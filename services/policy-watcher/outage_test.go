package main

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// tcpProxy forwards a loopback port to the API server and can cut every connection and refuse
// new ones for a while: the API server becomes unreachable for the service only.
type tcpProxy struct {
	t      *testing.T
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
}

func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	p := &tcpProxy{t: t, target: target, addr: testenv.FreeAddr(t), conns: map[net.Conn]struct{}{}}
	p.restore()
	t.Cleanup(p.cut)
	return p
}

// restore listens again on the same address.
func (p *tcpProxy) restore() {
	p.t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("proxy listen: %v", err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns[in], p.conns[out] = struct{}{}, struct{}{}
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
}

// cut closes the listener and every open connection.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// behindProxy starts a proxy to the shared API server and returns it with the service's
// environment for claim (300 ms poll, no debounce) reaching the API server through it.
func behindProxy(t *testing.T, c *cluster, claim string) (*tcpProxy, map[string]string) {
	t.Helper()
	u, err := url.Parse(c.kube.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, u.Host)
	env := directEnv(c, claim, "300ms", "0")
	env["KUBECONFIG"] = writeKubeconfig(t, c.kube, "https://"+p.addr, "")
	return p, env
}

// The API server becoming unreachable is not fatal: the service stays up, reports not ready,
// counts and logs the errors, and catches up with what changed once the server is back.
func TestAPIServerOutageNotFatal(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "outage")
	claim := c.name("outage-claim")
	p, env := behindProxy(t, c, claim)
	c.createPolicy("p", "Compliant")
	s := startService(t, env)
	c.waitClaim(claim, events.Compliant, 10*time.Second)
	s.WaitReady(5 * time.Second)

	p.cut()
	c.setPolicy("p", "NonCompliant") // through the test's own connection
	testenv.EventuallyTrue(t, 5*time.Second, "API errors are counted while the API server is unreachable", func() bool {
		return s.metric(`enforcement_policy_watcher_api_errors_total{operation="get_claim"}`)+
			s.metric(`enforcement_policy_watcher_api_errors_total{operation="list_policies"}`) >= 2
	})
	if code, _ := httpGet(t, "http://"+s.Health+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz during the outage: %d, want 503", code)
	}
	if done, err := s.Exited(); done {
		t.Fatalf("service stopped during the outage: %v", err)
	}
	if got, _ := c.claim(claim); got.Value != events.Compliant {
		t.Fatalf("claim changed while the service could not reach the API server: %+v", got)
	}

	p.restore()
	start := time.Now()
	_, at := c.waitClaim(claim, events.NonCompliant, 20*time.Second)
	t.Logf("caught up %s after the API server came back", at.Sub(start).Round(time.Millisecond))
	s.WaitReady(5 * time.Second)
}

// An API server that is not reachable when the service starts is not fatal either: the service
// starts, is not ready, and does its work once the server answers.
func TestAPIServerUnavailableAtStart(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "outage-start")
	claim := c.name("outage-start-claim")
	p, env := behindProxy(t, c, claim)
	p.cut()
	c.createPolicy("p", "NonCompliant")
	s := startService(t, env)
	s.waitLog("Evaluation failed; retrying", 5*time.Second)
	if code, _ := httpGet(t, "http://"+s.Health+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with the API server unreachable: %d, want 503", code)
	}
	time.Sleep(time.Second)
	if done, err := s.Exited(); done {
		t.Fatalf("service stopped: %v", err)
	}

	p.restore()
	c.waitClaim(claim, events.NonCompliant, 15*time.Second)
	s.WaitReady(5 * time.Second)
	s.waitLog(`"msg":"Watching Policies"`, 10*time.Second) // the access review was retried too
}
