package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check reports whether one dependency is usable; nil means ready.
type Check func(ctx context.Context) error

// Health serves /healthz (the process is alive) and /readyz (every readiness check passes).
// Checks are named so that a failing /readyz says which dependency is down.
type Health struct {
	mu     sync.RWMutex
	checks map[string]Check
}

// NewHealth returns a Health with no checks (ready until checks are added).
func NewHealth() *Health { return &Health{checks: make(map[string]Check)} }

// AddCheck adds or replaces the readiness check called name.
func (h *Health) AddCheck(name string, c Check) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks[name] = c
}

// Ready runs every check with a 2 s timeout and returns the failures, joined, in name order.
func (h *Health) Ready(ctx context.Context) error {
	h.mu.RLock()
	names := make([]string, 0, len(h.checks))
	checks := make(map[string]Check, len(h.checks))
	for n, c := range h.checks {
		names = append(names, n)
		checks[n] = c
	}
	h.mu.RUnlock()
	sort.Strings(names)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var errs []error
	for _, n := range names {
		if err := checks[n](ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// Handler serves /healthz and /readyz.
func (h *Health) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := h.Ready(r.Context()); err != nil {
			http.Error(w, "not ready: "+strings.ReplaceAll(err.Error(), "\n", "; "), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// NewRegistry returns a non-global registry with the Go and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// MetricsHandler serves reg at /metrics.
func MetricsHandler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}

// PprofHandler serves the Go runtime's profiles at /debug/pprof/ (net/http/pprof), for
// PPROF_ADDR.
func PprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// Server is a started HTTP server.
type Server struct {
	srv *http.Server
	// Addr is the address actually bound (useful with ":0").
	Addr string
}

// Listen binds addr and serves h in the background. It fails at once if addr cannot be bound.
func Listen(addr string, h http.Handler, logger *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	s := &Server{srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}, Addr: ln.Addr().String()}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("HTTP server stopped", "addr", s.Addr, "error", err)
		}
	}()
	return s, nil
}

// Shutdown stops the server, waiting for open requests until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	if s == nil {
		return nil
	}
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
		return fmt.Errorf("stop HTTP server %s: %w", s.Addr, err)
	}
	return nil
}
