package testenv

import (
	"net/http"
	"sync"

	"k8s.io/client-go/rest"
)

// Request is one request a Kubernetes client sent, as a RequestLog saw it.
type Request struct {
	Method, Path string
	// Watch is true for a watch (a GET with watch=true), which stays open instead of answering.
	Watch bool
}

// RequestLog records every request of the clients built from the configurations it wraps, so
// a test can count the API requests some work costs (reads that should come from a cache,
// writes that should not happen). Its methods are safe for concurrent use.
type RequestLog struct {
	mu   sync.Mutex
	reqs []Request
}

// Wrap returns a copy of cfg whose transport records each request in the log before sending it.
func (l *RequestLog) Wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			l.mu.Lock()
			l.reqs = append(l.reqs, Request{Method: r.Method, Path: r.URL.Path, Watch: r.URL.Query().Get("watch") == "true"})
			l.mu.Unlock()
			return rt.RoundTrip(r)
		})
	})
	return cfg
}

// Mark returns the current position in the log, for Since.
func (l *RequestLog) Mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.reqs)
}

// Since returns the requests recorded after mark, in the order they were sent.
func (l *RequestLog) Since(mark int) []Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Request(nil), l.reqs[mark:]...)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
