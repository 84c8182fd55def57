package testenv

import (
	"io"
	"net"
	"sync"
	"testing"
)

// TCPProxy forwards the connections it accepts on a loopback address to a target address, and
// can be cut and restored: a test stands it between a client and a real server to make the
// server unreachable (connections refused, open ones dropped) and reachable again at the same
// address.
type TCPProxy struct {
	t      testing.TB
	addr   string
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
}

// NewTCPProxy starts a proxy to target on a free loopback port; it stops with the test.
func NewTCPProxy(t testing.TB, target string) *TCPProxy {
	t.Helper()
	p := &TCPProxy{t: t, addr: FreeAddr(t), target: target, conns: map[net.Conn]bool{}}
	p.Open()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *TCPProxy) Addr() string { return p.addr }

// Open accepts connections again (a no-op while open).
func (p *TCPProxy) Open() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		return
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("proxy to %s: listen on %s: %v", p.target, p.addr, err)
	}
	p.ln = ln
	go p.accept(ln)
}

// Close refuses new connections and drops the open ones.
func (p *TCPProxy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

func (p *TCPProxy) accept(ln net.Listener) {
	for {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		if !p.track(ln, in, out) {
			continue
		}
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

// track records a pair of connections, unless the listener was closed meanwhile.
func (p *TCPProxy) track(ln net.Listener, conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != ln {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = true
	}
	return true
}

func (p *TCPProxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}
