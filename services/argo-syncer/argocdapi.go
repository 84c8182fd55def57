package main

// API mode: argo-syncer talks to Argo CD's API server (argocd-server) with argo-cd/v2's own Go
// client instead of writing the objects through the Kubernetes API, as the original operator
// did. This file holds the session (log-in, renewal, readiness) and the translation of Argo CD's
// gRPC errors into the Kubernetes API errors the Syncer already understands; argocdapi_objects.go
// holds the clients the Syncer writes and reads through.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/argoproj/argo-cd/v2/pkg/apiclient"
	applicationpkg "github.com/argoproj/argo-cd/v2/pkg/apiclient/application"
	clusterpkg "github.com/argoproj/argo-cd/v2/pkg/apiclient/cluster"
	projectpkg "github.com/argoproj/argo-cd/v2/pkg/apiclient/project"
	sessionpkg "github.com/argoproj/argo-cd/v2/pkg/apiclient/session"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ArgoAPIConfig is how argo-syncer reaches Argo CD's API server in API mode (ARGO_* variables;
// see Config and the README's "API mode").
type ArgoAPIConfig struct {
	// URL (ARGO_URL) is the API server's address: http:// talks plain text, https:// TLS. A path
	// is the gRPC-web root path when grpc-web is on.
	URL string
	// Username and Password (ARGO_USERNAME, ARGO_PASSWORD) log in with POST /api/v1/session, again
	// whenever the session expires; Token (ARGO_TOKEN) is an account or project token instead.
	Username, Password, Token string
	// Insecure (ARGO_INSECURE) skips the verification of the server's certificate; ServerCRT
	// (ARGO_SERVER_CRT) is a PEM file of the certificate or CA to trust, as the CLI's
	// --insecure and --server-crt.
	Insecure  bool
	ServerCRT string
	// GRPCWeb (ARGO_GRPC_WEB) and GRPCWebRootPath (ARGO_GRPC_WEB_ROOT_PATH) speak gRPC-web, for
	// ingresses that do not pass gRPC, as the CLI's --grpc-web and --grpc-web-root-path.
	GRPCWeb         bool
	GRPCWebRootPath string
	// PollInterval (ARGO_POLL_INTERVAL, default 30s) is how often AppProjects and clusters are
	// listed again: Argo CD's API watches Applications only.
	PollInterval time.Duration
}

// Enabled reports whether API mode is on (ARGO_URL is set).
func (c ArgoAPIConfig) Enabled() bool { return c.URL != "" }

// clientOptions turns the configuration into apiclient's options, without a token.
func (c ArgoAPIConfig) clientOptions() (*apiclient.ClientOptions, error) {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("ARGO_URL=%q: want http(s)://host[:port][/path]", c.URL)
	}
	host := u.Host
	if u.Port() == "" {
		host += map[string]string{"http": ":80", "https": ":443"}[u.Scheme]
	}
	root := c.GRPCWebRootPath
	if root == "" {
		root = strings.Trim(u.Path, "/")
	}
	return &apiclient.ClientOptions{
		ServerAddr:      host,
		PlainText:       u.Scheme == "http",
		Insecure:        c.Insecure,
		CertFile:        c.ServerCRT,
		GRPCWeb:         c.GRPCWeb,
		GRPCWebRootPath: root,
		UserAgent:       serviceName,
		// The client would otherwise read the argocd CLI's ~/.config/argocd/config: argo-syncer
		// takes everything from its environment. A path that never exists reads as no config.
		ConfigPath: filepath.Join(os.TempDir(), "argo-syncer-has-no-argocd-cli-config", "config"),
	}, nil
}

// argoSession holds the connections to Argo CD's API with a valid token. It logs in lazily, and
// again when Argo CD answers Unauthenticated (the session expired), once per expired session.
// It records the last outcome for the readiness check "argocd".
type argoSession struct {
	cfg     ArgoAPIConfig
	opts    *apiclient.ClientOptions
	metrics *Metrics

	mu      sync.Mutex // held while connecting and logging in
	current *argoClients

	stateMu sync.Mutex // never held across a request, so that /readyz does not wait for one
	lastErr error      // of the last call; nil after a success
}

// argoClients are the service clients of one session.
type argoClients struct {
	apps     applicationpkg.ApplicationServiceClient
	projects projectpkg.ProjectServiceClient
	clusters clusterpkg.ClusterServiceClient
	closers  []io.Closer
}

func (c *argoClients) close() {
	for _, cl := range c.closers {
		_ = cl.Close()
	}
}

func newArgoSession(cfg ArgoAPIConfig, metrics *Metrics) (*argoSession, error) {
	opts, err := cfg.clientOptions()
	if err != nil {
		return nil, err
	}
	return &argoSession{cfg: cfg, opts: opts, metrics: metrics, lastErr: errors.New("not connected yet")}, nil
}

// clients returns the current session's clients, logging in first when there is none.
func (s *argoSession) clients(ctx context.Context) (*argoClients, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current != nil {
		return s.current, nil
	}
	token := s.cfg.Token
	if token == "" {
		var err error
		token, err = s.login(ctx)
		s.metrics.argocdLogin(err)
		if err != nil {
			s.setState(err)
			return nil, err
		}
	}
	opts := *s.opts
	opts.AuthToken = token
	client, err := apiclient.NewClient(&opts)
	if err != nil {
		return nil, fmt.Errorf("argo cd client for %s: %w", s.cfg.URL, err)
	}
	c := &argoClients{}
	var closer io.Closer
	if closer, c.apps, err = client.NewApplicationClient(); err == nil {
		c.closers = append(c.closers, closer)
		if closer, c.projects, err = client.NewProjectClient(); err == nil {
			c.closers = append(c.closers, closer)
			if closer, c.clusters, err = client.NewClusterClient(); err == nil {
				c.closers = append(c.closers, closer)
			}
		}
	}
	if err != nil {
		c.close()
		return nil, fmt.Errorf("connect to Argo CD at %s: %w", s.cfg.URL, err)
	}
	s.current = c
	return c, nil
}

// login posts ARGO_USERNAME and ARGO_PASSWORD to the session service and returns the token.
func (s *argoSession) login(ctx context.Context) (string, error) {
	client, err := apiclient.NewClient(s.opts)
	if err != nil {
		return "", fmt.Errorf("argo cd client for %s: %w", s.cfg.URL, err)
	}
	closer, sessions, err := client.NewSessionClient()
	if err != nil {
		return "", fmt.Errorf("connect to Argo CD at %s: %w", s.cfg.URL, err)
	}
	defer closer.Close()
	resp, err := sessions.Create(ctx, &sessionpkg.SessionCreateRequest{Username: s.cfg.Username, Password: s.cfg.Password})
	if status.Code(err) == codes.Unauthenticated {
		return "", fmt.Errorf("log in to Argo CD at %s as %s (ARGO_USERNAME, ARGO_PASSWORD): refused: %s",
			s.cfg.URL, s.cfg.Username, status.Convert(err).Message())
	}
	if err != nil {
		return "", fmt.Errorf("log in to Argo CD at %s as %s: %w", s.cfg.URL, s.cfg.Username, err)
	}
	return resp.Token, nil
}

// expire drops the session c after Argo CD refused its token, so that the next call logs in
// again; a session another call renewed meanwhile is kept. It reports whether a new log-in can
// help: a fixed ARGO_TOKEN cannot be renewed.
func (s *argoSession) expire(c *argoClients) bool {
	if s.cfg.Token != "" {
		return false
	}
	s.drop(c)
	return true
}

// drop closes the connections of c unless another call replaced them already; the next call
// connects (and logs in) again. After Argo CD was unreachable this makes the next call dial at
// once, instead of waiting out gRPC's reconnection backoff (up to two minutes).
func (s *argoSession) drop(c *argoClients) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current == c {
		s.current = nil
		go c.close() // calls in flight on it finish first
	}
}

// record keeps the outcome of a call for the readiness check: Argo CD unreachable, refusing the
// credentials or answering 5xx makes argo-syncer not ready; an answer, even an error about one
// object, means the API works.
func (s *argoSession) record(err error) {
	if err != nil && !unusable(err) {
		err = nil
	}
	s.setState(err)
}

func (s *argoSession) setState(err error) {
	s.stateMu.Lock()
	s.lastErr = err
	s.stateMu.Unlock()
}

// Ready is the readiness check "argocd".
func (s *argoSession) Ready(context.Context) error {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	if s.lastErr != nil {
		return fmt.Errorf("the Argo CD API at %s: %w", s.cfg.URL, s.lastErr)
	}
	return nil
}

// Close closes the session's connections.
func (s *argoSession) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current != nil {
		s.current.close()
		s.current = nil
	}
}

// argoCall runs fn, the request method (for the metrics: "ApplicationService.Create"), with the
// session's clients, logging in again once if Argo CD says the session expired. Errors are Argo
// CD's gRPC errors, or the session's own.
func argoCall[T any](ctx context.Context, s *argoSession, method string, fn func(*argoClients) (T, error)) (T, error) {
	var zero T
	c, err := s.clients(ctx)
	if err != nil {
		s.metrics.argocdRequest(method, "NotSent")
		s.record(err)
		return zero, err
	}
	v, err := fn(c)
	s.metrics.argocdRequest(method, status.Code(err).String())
	if status.Code(err) == codes.Unauthenticated && s.expire(c) {
		if c, err = s.clients(ctx); err != nil {
			return zero, err
		}
		v, err = fn(c)
		s.metrics.argocdRequest(method, status.Code(err).String())
	}
	if status.Code(err) == codes.Unavailable {
		s.drop(c)
	}
	s.record(err)
	return v, err
}

// unusable reports whether err says the API as a whole cannot be used now: unreachable or
// answering 502/503/504 (gRPC's Unavailable), or the credentials refused. An error about one
// object (Argo CD wraps most of them as Unknown, a cluster it cannot reach among them) is not.
func unusable(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return true // the session's own errors: log-in, connection
	}
	return st.Code() == codes.Unavailable || st.Code() == codes.Unauthenticated
}

// Argo CD's answers to a create or an upsert that finds an object of that name with another spec.
var specDiffers = []string{"existing cluster spec is different", "existing project spec is different", "existing application spec is different"}

// kubeError turns an error of a call about the named object of resource into the Kubernetes API
// error the Syncer classifies: NotFound, AlreadyExists, Conflict, Forbidden and BadRequest
// (a rejection: permanent) keep their meaning; the rest (unreachable, 5xx, expired credentials)
// become retried errors whose message says that Argo CD's API is the problem.
func kubeError(err error, resource, name, url string) error {
	if err == nil {
		return nil
	}
	gr := schema.GroupResource{Group: "argoproj.io", Resource: resource}
	st, ok := status.FromError(err)
	if !ok {
		return apierrors.NewServiceUnavailable(fmt.Sprintf("Argo CD API at %s: %v", url, err))
	}
	msg := st.Message()
	switch st.Code() {
	case codes.NotFound:
		return apierrors.NewNotFound(gr, name)
	case codes.AlreadyExists:
		return apierrors.NewAlreadyExists(gr, name)
	case codes.Aborted:
		return apierrors.NewConflict(gr, name, errors.New(msg))
	case codes.PermissionDenied:
		return apierrors.NewForbidden(gr, name, errors.New(msg))
	case codes.InvalidArgument, codes.FailedPrecondition:
		for _, s := range specDiffers {
			if strings.Contains(msg, s) {
				return apierrors.NewAlreadyExists(gr, name)
			}
		}
		if notYetKnown(msg) {
			return apierrors.NewServiceUnavailable(fmt.Sprintf("Argo CD API at %s: %s %s: %s (retried: its cache may not show a cluster or project written just now)", url, resource, name, msg))
		}
		return apierrors.NewBadRequest(fmt.Sprintf("Argo CD API at %s refused %s %s: %s", url, resource, name, msg))
	case codes.Unauthenticated:
		return apierrors.NewUnauthorized(fmt.Sprintf("Argo CD API at %s: credentials refused (ARGO_USERNAME/ARGO_PASSWORD or ARGO_TOKEN): %s", url, msg))
	case codes.ResourceExhausted:
		return apierrors.NewTooManyRequests(fmt.Sprintf("Argo CD API at %s: %s", url, msg), 1)
	}
	if st.Code() == codes.Unavailable {
		return apierrors.NewServiceUnavailable(fmt.Sprintf("Argo CD API at %s unavailable: %s", url, msg))
	}
	// Unknown, Internal, DeadlineExceeded: Argo CD wraps the errors of what it did for the request
	// (a cluster it could not reach, a Kubernetes API error) as Unknown; retried.
	return apierrors.NewInternalError(fmt.Errorf("the Argo CD API at %s: %s %s: %s", url, resource, name, msg))
}

// notYetKnown reports whether a refusal may only mean that argocd-server's cache does not yet
// show a cluster or project that was written a moment ago. That includes a project that does not
// allow the Application's repository or destination yet: argo-syncer writes the project to allow
// them before it writes the Application, and argocd-server validates against its own cache.
func notYetKnown(msg string) bool {
	for _, s := range []string{"there are no clusters with this name", "unable to find destination server", "not found",
		"is not permitted in project", "do not match any of the allowed destinations in project"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
