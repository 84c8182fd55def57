package testenv

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// natsReadyTimeout bounds how long StartNATS and Restart wait for the server to accept clients.
const natsReadyTimeout = 10 * time.Second

// NATSOption configures StartNATS. Options are applied again on every Restart, so the
// restarted server has the same configuration.
type NATSOption func(*natsSettings)

type natsSettings struct {
	configure []func(*server.Options)
	logger    server.Logger
}

// WithServerOptions lets a test change the nats-server options (for example MaxPayload or
// authorization) after testenv has set its defaults: 127.0.0.1, a random port, JetStream on a
// temporary store, no logging, no signal handlers. Changing Host breaks URL.
func WithServerOptions(configure func(*server.Options)) NATSOption {
	return func(s *natsSettings) { s.configure = append(s.configure, configure) }
}

// WithNATSLogs sends the server's log (notices, warnings, errors) to t.Logf, which helps when a
// test fails inside NATS. Off by default because it is verbose. t must outlive the server: pass
// the same t as to StartNATS.
func WithNATSLogs(t testing.TB) NATSOption {
	return func(s *natsSettings) { s.logger = tLogger{t} }
}

// NATS is an embedded nats-server with JetStream, started by StartNATS. Its URL, store
// directory and port stay the same across Restart. It is safe for concurrent use.
type NATS struct {
	mu       sync.Mutex
	srv      *server.Server
	port     int
	name     string
	storeDir string
	opts     []NATSOption
}

// StartNATS starts an in-process nats-server with JetStream enabled, listening on a random port
// of 127.0.0.1 and storing its data in a directory from t.TempDir. The server is shut down when
// the test and its subtests finish. It fails the test if the server does not start and accept
// connections within 10 seconds.
func StartNATS(t testing.TB, opts ...NATSOption) *NATS {
	t.Helper()
	n := &NATS{
		port:     server.RANDOM_PORT,
		name:     "testenv",
		storeDir: t.TempDir(),
		opts:     opts,
	}
	if err := n.start(); err != nil {
		t.Fatalf("start NATS: %v", err)
	}
	// Registered after t.TempDir, so it runs before the store is removed.
	t.Cleanup(n.Shutdown)
	return n
}

// URL returns the client URL, nats://127.0.0.1:<port>. It stays valid across Restart.
func (n *NATS) URL() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return fmt.Sprintf("nats://127.0.0.1:%d", n.port)
}

// StoreDir returns the JetStream store directory, which survives Restart.
func (n *NATS) StoreDir() string {
	return n.storeDir
}

// Server returns the running server for inspection (for example JetStream account limits), or
// nil after Shutdown.
func (n *NATS) Server() *server.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv
}

// Restart shuts the server down (if it is running) and starts a new one on the same port and
// store directory, so streams, consumers, KV buckets and their messages survive. Connected
// clients see a disconnect and, with reconnects enabled, come back on their own. It fails the
// test if the new server does not come up, for example because another process took the port.
func (n *NATS) Restart(t testing.TB) {
	t.Helper()
	n.Shutdown()
	if err := n.start(); err != nil {
		t.Fatalf("restart NATS: %v", err)
	}
}

// Shutdown stops the server and waits until it has closed its store. Calling it again, or on a
// server that is already stopped, does nothing. The URL keeps pointing at the port.
func (n *NATS) Shutdown() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv == nil {
		return
	}
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
	n.srv = nil
}

// start creates and starts a server with the current settings and records the port it got.
func (n *NATS) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil {
		return errors.New("server already running")
	}
	opts := &server.Options{
		ServerName: n.name,
		Host:       "127.0.0.1",
		Port:       n.port,
		JetStream:  true,
		StoreDir:   n.storeDir,
		NoLog:      true,
		NoSigs:     true,
	}
	var settings natsSettings
	for _, opt := range n.opts {
		opt(&settings)
	}
	for _, configure := range settings.configure {
		configure(opts)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return err
	}
	if settings.logger != nil {
		srv.SetLoggerV2(settings.logger, opts.Debug, opts.Trace, false)
	}
	srv.Start()
	if !srv.ReadyForConnections(natsReadyTimeout) {
		srv.Shutdown()
		return fmt.Errorf("server not ready for connections within %s", natsReadyTimeout)
	}
	addr, ok := srv.Addr().(*net.TCPAddr)
	if !ok {
		srv.Shutdown()
		return fmt.Errorf("unexpected listen address %v", srv.Addr())
	}
	n.port = addr.Port
	n.srv = srv
	return nil
}

// tLogger adapts testing.TB to the nats-server logger interface.
type tLogger struct{ t testing.TB }

func (l tLogger) Noticef(format string, v ...any) { l.t.Logf("[nats] "+format, v...) }
func (l tLogger) Warnf(format string, v ...any)   { l.t.Logf("[nats WRN] "+format, v...) }
func (l tLogger) Fatalf(format string, v ...any)  { l.t.Logf("[nats FTL] "+format, v...) }
func (l tLogger) Errorf(format string, v ...any)  { l.t.Logf("[nats ERR] "+format, v...) }
func (l tLogger) Debugf(format string, v ...any)  { l.t.Logf("[nats DBG] "+format, v...) }
func (l tLogger) Tracef(format string, v ...any)  { l.t.Logf("[nats TRC] "+format, v...) }
