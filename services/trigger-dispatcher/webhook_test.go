package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/service/egress"
)

// receiver is a webhook endpoint for tests: it answers each call with the next scripted
// response (repeating the last one) and records what it received.
type receiver struct {
	t      testing.TB
	mu     sync.Mutex
	calls  []receivedCall
	script []func(w http.ResponseWriter, r *http.Request)
	onCall func(r *http.Request, body []byte) // runs before the scripted answer, while handling
	srv    *httptest.Server
}

type receivedCall struct {
	Header http.Header
	Body   []byte
	At     time.Time
}

func newReceiver(t testing.TB, script ...func(w http.ResponseWriter, r *http.Request)) *receiver {
	rc := &receiver{t: t, script: script}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		n := len(rc.calls)
		rc.calls = append(rc.calls, receivedCall{Header: r.Header.Clone(), Body: body, At: time.Now()})
		onCall := rc.onCall
		var answer func(http.ResponseWriter, *http.Request)
		if len(rc.script) > 0 {
			answer = rc.script[min(n, len(rc.script)-1)]
		}
		rc.mu.Unlock()
		if onCall != nil {
			onCall(r, body)
		}
		if answer == nil {
			w.WriteHeader(http.StatusOK)
			return
		}
		answer(w, r)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) URL() string { return rc.srv.URL }

func (rc *receiver) Calls() []receivedCall {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]receivedCall(nil), rc.calls...)
}

func status(code int) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }
}

// statusWhile answers code while failing holds, and 200 OK once a test clears it.
func statusWhile(failing *atomic.Bool, code int) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		if failing.Load() {
			w.WriteHeader(code)
			return
		}
		w.WriteHeader(http.StatusOK)
	}
}

func retryAfter(seconds string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", seconds)
		w.WriteHeader(http.StatusTooManyRequests)
	}
}

func sleepFor(d time.Duration) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusOK)
	}
}

// loopbackOpen is the egress policy of tests whose receivers listen on loopback: the default
// denied list with loopback opened, as the local run command opens it.
var loopbackOpen = egress.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}

func testWebhookClient(policy egress.Policy) *webhookClient {
	return &webhookClient{
		http:        newHTTPClient(policy),
		maxAttempts: 4,
		backoffBase: 5 * time.Millisecond,
		backoffMax:  50 * time.Millisecond,
		logger:      discardLogger(),
		now:         time.Now,
		stop:        make(chan struct{}),
	}
}

// Retries happen exactly on connection errors, timeouts, 429 and 5xx, and are bounded; other
// statuses, redirects included, end the delivery at once.
func TestDeliverRetries(t *testing.T) {
	redirectTarget := newReceiver(t)
	tests := []struct {
		name          string
		script        []func(http.ResponseWriter, *http.Request)
		wantDelivered bool
		wantAttempts  int
		wantStatus    int
		wantMessage   string
	}{
		{"2xx at once", []func(http.ResponseWriter, *http.Request){status(204)}, true, 1, 204, ""},
		{"5xx then 2xx", []func(http.ResponseWriter, *http.Request){status(500), status(502), status(200)}, true, 3, 200, ""},
		{"429 then 2xx", []func(http.ResponseWriter, *http.Request){status(429), status(200)}, true, 2, 200, ""},
		{"5xx bounded", []func(http.ResponseWriter, *http.Request){status(503)}, false, 4, 503, "gave up after 4 attempts"},
		{"400 not retried", []func(http.ResponseWriter, *http.Request){status(400), status(200)}, false, 1, 400, "client_error"},
		{"404 not retried", []func(http.ResponseWriter, *http.Request){status(404)}, false, 1, 404, "client_error"},
		{"redirect not followed", []func(http.ResponseWriter, *http.Request){func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, redirectTarget.URL(), http.StatusTemporaryRedirect)
		}}, false, 1, 307, "redirect"},
		{"timeout then 2xx", []func(http.ResponseWriter, *http.Request){sleepFor(time.Second), status(200)}, true, 2, 200, ""},
		{"timeouts bounded", []func(http.ResponseWriter, *http.Request){sleepFor(time.Second)}, false, 4, 0, "timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := newReceiver(t, tt.script...)
			c := testWebhookClient(loopbackOpen)
			res, err := c.deliver(context.Background(), webhookRequest{
				ID: "dlv_test", Phase: "beforeInstall", Endpoint: rc.URL(), Timeout: 100 * time.Millisecond, Body: []byte(`{}`),
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Delivered != tt.wantDelivered || res.Attempts != tt.wantAttempts || res.StatusCode != tt.wantStatus {
				t.Errorf("result = %+v, want delivered=%v attempts=%d status=%d", res, tt.wantDelivered, tt.wantAttempts, tt.wantStatus)
			}
			if !strings.Contains(res.Message, tt.wantMessage) {
				t.Errorf("message %q does not contain %q", res.Message, tt.wantMessage)
			}
			if got := len(rc.Calls()); got != tt.wantAttempts {
				t.Errorf("receiver got %d calls, want %d", got, tt.wantAttempts)
			}
		})
	}
	if n := len(redirectTarget.Calls()); n != 0 {
		t.Errorf("redirect target was called %d times, want 0", n)
	}
}

// Every attempt is reported as soon as it is classified, numbered on from FirstAttempt, with
// whether and when a retry follows; a report that fails ends the delivery with its error before
// any further attempt.
func TestDeliverReportsEveryAttempt(t *testing.T) {
	rc := newReceiver(t, status(500), sleepFor(time.Second), status(200))
	c := testWebhookClient(loopbackOpen)
	var reports []attemptReport
	res, err := c.deliver(context.Background(), webhookRequest{
		ID: "dlv_report", Phase: "afterInstall", Endpoint: rc.URL(), Timeout: 100 * time.Millisecond, FirstAttempt: 4,
		Report: func(_ context.Context, a attemptReport) error {
			if n := len(rc.Calls()); n != len(reports)+1 {
				t.Errorf("report of attempt %d after %d calls", a.Attempt, n)
			}
			reports = append(reports, a)
			return nil
		},
	})
	if err != nil || !res.Delivered || res.Attempts != 3 {
		t.Fatalf("deliver = %+v, %v; want delivered after 3 attempts", res, err)
	}
	want := []struct {
		attempt int
		result  string
		status  int
		retry   bool
	}{{4, resultServerError, 500, true}, {5, resultTimeout, 0, true}, {6, resultSuccess, 200, false}}
	if len(reports) != len(want) {
		t.Fatalf("%d reports, want %d", len(reports), len(want))
	}
	for i, w := range want {
		r := reports[i]
		if r.Attempt != w.attempt || r.Result != w.result || r.StatusCode != w.status || r.WillRetry != w.retry || (r.RetryIn > 0) != w.retry {
			t.Errorf("report %d = %+v, want attempt %d, %s, status %d, retry %v", i, r, w.attempt, w.result, w.status, w.retry)
		}
	}
	if reports[1].Err == nil || reports[1].Duration < 100*time.Millisecond {
		t.Errorf("timed-out attempt reported error %v after %s", reports[1].Err, reports[1].Duration)
	}

	failing := newReceiver(t, status(503))
	res, err = c.deliver(context.Background(), webhookRequest{
		ID: "dlv_unreported", Phase: "afterInstall", Endpoint: failing.URL(), Timeout: 100 * time.Millisecond,
		Report: func(context.Context, attemptReport) error { return errors.New("stream unavailable") },
	})
	if err == nil || !strings.Contains(err.Error(), "stream unavailable") || res.Delivered {
		t.Fatalf("deliver with a failing report = %+v, %v; want its error", res, err)
	}
	if n := len(failing.Calls()); n != 1 {
		t.Errorf("%d calls after the report failed, want 1", n)
	}
}

// A connection error (nothing listens) is retried up to the bound.
func TestDeliverConnectionErrorRetried(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c := testWebhookClient(loopbackOpen)
	res, err := c.deliver(context.Background(), webhookRequest{ID: "dlv_x", Phase: "afterInstall", Endpoint: url, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Delivered || res.Attempts != 4 || !strings.Contains(res.Message, "connection") {
		t.Errorf("result = %+v, want 4 failed connection attempts", res)
	}
}

// Retry-After on a 429 sets the wait before the next attempt.
func TestDeliverHonoursRetryAfter(t *testing.T) {
	rc := newReceiver(t, retryAfter("1"), status(200))
	c := testWebhookClient(loopbackOpen)
	c.backoffMax = 5 * time.Second
	res, err := c.deliver(context.Background(), webhookRequest{ID: "dlv_ra", Phase: "beforeInstall", Endpoint: rc.URL(), Timeout: time.Second})
	if err != nil || !res.Delivered {
		t.Fatalf("deliver = %+v, %v", res, err)
	}
	calls := rc.Calls()
	if gap := calls[1].At.Sub(calls[0].At); gap < 900*time.Millisecond {
		t.Errorf("second attempt %s after the 429 with Retry-After: 1, want about 1s", gap)
	}
}

// Every attempt carries the same webhook-id; the backoff between them grows.
func TestDeliverSameIDOnEveryAttempt(t *testing.T) {
	rc := newReceiver(t, status(500), status(500), status(200))
	c := testWebhookClient(loopbackOpen)
	if _, err := c.deliver(context.Background(), webhookRequest{ID: "dlv_same", Phase: "beforeInstall", Endpoint: rc.URL(), Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	for i, call := range rc.Calls() {
		if got := call.Header.Get("webhook-id"); got != "dlv_same" {
			t.Errorf("attempt %d webhook-id = %q, want dlv_same", i+1, got)
		}
	}
}

// The signature verifies with an independent implementation of the Standard Webhooks check,
// for both key formats (whsec_ base64 and raw), and fails with another key.
func TestDeliverSignature(t *testing.T) {
	for name, secret := range map[string]string{
		"whsec":   "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")),
		"raw key": "a-plain-shared-secret",
	} {
		t.Run(name, func(t *testing.T) {
			rc := newReceiver(t)
			key, err := signingKey([]byte(secret))
			if err != nil {
				t.Fatal(err)
			}
			c := testWebhookClient(loopbackOpen)
			body := []byte(`{"phase":"beforeInstall"}`)
			if _, err := c.deliver(context.Background(), webhookRequest{ID: "dlv_sig", Phase: "beforeInstall", Endpoint: rc.URL(), Timeout: time.Second, Body: body, Key: key}); err != nil {
				t.Fatal(err)
			}
			call := rc.Calls()[0]
			if err := verifyStandardWebhook(secret, call.Header, call.Body, time.Now()); err != nil {
				t.Errorf("signature does not verify: %v", err)
			}
			if err := verifyStandardWebhook("whsec_"+base64.StdEncoding.EncodeToString([]byte("another key")), call.Header, call.Body, time.Now()); err == nil {
				t.Error("signature verifies with the wrong key")
			}
			tampered := append([]byte(nil), call.Body...)
			tampered[2] = 'x'
			if err := verifyStandardWebhook(secret, call.Header, tampered, time.Now()); err == nil {
				t.Error("signature verifies a tampered body")
			}
		})
	}
}

// verifyStandardWebhook is the receiver's side of the Standard Webhooks specification, written
// from the specification independently of sign: the secret is "whsec_<base64>" (or, for this
// project's raw keys, the bytes themselves), the signed content is "<id>.<timestamp>.<body>",
// the header holds space-separated "v1,<base64>" signatures, and the timestamp must be within
// five minutes.
func verifyStandardWebhook(secret string, h http.Header, body []byte, now time.Time) error {
	id, ts, sigs := h.Get("Webhook-Id"), h.Get("Webhook-Timestamp"), h.Get("Webhook-Signature")
	if id == "" || ts == "" || sigs == "" {
		return errors.New("missing webhook headers")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("timestamp %q: %w", ts, err)
	}
	if math.Abs(float64(now.Unix()-sec)) > 300 {
		return errors.New("timestamp outside the tolerance")
	}
	key := []byte(secret)
	if strings.HasPrefix(secret, "whsec_") {
		if key, err = base64.StdEncoding.DecodeString(secret[len("whsec_"):]); err != nil {
			return err
		}
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%s.%s", id, ts, body)
	want := mac.Sum(nil)
	for _, s := range strings.Fields(sigs) {
		version, encoded, ok := strings.Cut(s, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(encoded)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("no signature matches")
}

// Targets in denied networks are refused when connecting, on the resolved address, and not
// retried; a hostname resolving to a denied address is refused too.
func TestDeliverRefusesDeniedNetworks(t *testing.T) {
	rc := newReceiver(t)
	port := rc.URL()[strings.LastIndex(rc.URL(), ":"):]
	tests := []struct {
		name     string
		policy   egress.Policy
		endpoint string
	}{
		{"loopback by address", egress.Policy{}, rc.URL()},
		{"loopback by name (refused after resolution)", egress.Policy{}, "http://localhost" + port},
		{"loopback, IPv4-mapped", egress.Policy{}, "http://[::ffff:127.0.0.1]" + port},
		{"loopback, NAT64", egress.Policy{}, "http://[64:ff9b::7f00:1]" + port},
		{"private", loopbackOpen, "http://10.0.0.1" + port},
		{"metadata address", loopbackOpen, "http://169.254.169.254/latest/meta-data/"},
		{"IPv6 metadata address", loopbackOpen, "http://[fd00:ec2::254]/latest/meta-data/"},
		{"denied by the operator", egress.Policy{Allowed: loopbackOpen.Allowed, Denied: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}, rc.URL()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testWebhookClient(tt.policy)
			res, err := c.deliver(context.Background(), webhookRequest{ID: "dlv_ssrf", Phase: "beforeInstall", Endpoint: tt.endpoint, Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if res.Delivered || res.Attempts != 1 || !strings.Contains(res.Message, "refused: dial tcp") || !strings.Contains(res.Message, "address refused by the network policy") {
				t.Errorf("result = %+v, want one refused attempt", res)
			}
		})
	}
	if n := len(rc.Calls()); n != 0 {
		t.Errorf("receiver was called %d times through a denied address", n)
	}

	// A receiver on an opened network may not send the dispatcher on to a denied one: the
	// redirect is the final answer and the denied address is never called.
	var deniedCalls atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	denied := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { deniedCalls.Add(1) })}}
	denied.Start()
	t.Cleanup(denied.Close)
	bouncer := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, denied.URL, http.StatusTemporaryRedirect)
	})
	onlyFirst := egress.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	res, err := testWebhookClient(onlyFirst).deliver(context.Background(), webhookRequest{ID: "dlv_bounce", Phase: "beforeInstall", Endpoint: bouncer.URL(), Timeout: time.Second})
	if err != nil || res.Delivered || res.StatusCode != http.StatusTemporaryRedirect {
		t.Errorf("redirect to a denied address: %+v, %v; want the 307 as a failure", res, err)
	}
	if n := deniedCalls.Load(); n != 0 {
		t.Errorf("denied address called %d times after a redirect", n)
	}

	// The allow-list opens loopback, by address and by name.
	for _, endpoint := range []string{rc.URL(), "http://localhost" + port} {
		res, err := testWebhookClient(loopbackOpen).deliver(context.Background(), webhookRequest{ID: "dlv_ok", Phase: "beforeInstall", Endpoint: endpoint, Timeout: time.Second})
		if err != nil || !res.Delivered {
			t.Errorf("%s with loopback allowed: %+v, %v; want delivered", endpoint, res, err)
		}
	}
}

// A delivery waiting for its next attempt ends with errShuttingDown when the service stops.
func TestDeliverStopsWhileWaiting(t *testing.T) {
	rc := newReceiver(t, status(500))
	stop := make(chan struct{})
	c := testWebhookClient(loopbackOpen)
	c.stop, c.backoffBase, c.backoffMax = stop, time.Hour, time.Hour
	done := make(chan error, 1)
	go func() {
		_, err := c.deliver(context.Background(), webhookRequest{ID: "dlv_stop", Phase: "beforeInstall", Endpoint: rc.URL(), Timeout: time.Second})
		done <- err
	}()
	for len(rc.Calls()) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	select {
	case err := <-done:
		if !errors.Is(err, errShuttingDown) {
			t.Errorf("deliver = %v, want errShuttingDown", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("deliver did not return after stop")
	}
}

func TestBackoff(t *testing.T) {
	c := &webhookClient{backoffBase: 100 * time.Millisecond, backoffMax: time.Second}
	for attempt, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 5: time.Second, 9: time.Second} {
		for range 20 {
			if got := c.backoff(attempt, 0); got < want/2 || got > want {
				t.Fatalf("backoff(%d) = %s, want in [%s, %s]", attempt, got, want/2, want)
			}
		}
	}
	if got := c.backoff(1, 700*time.Millisecond); got != 700*time.Millisecond {
		t.Errorf("backoff with Retry-After 700ms = %s", got)
	}
	if got := c.backoff(1, time.Hour); got != time.Second {
		t.Errorf("backoff with Retry-After 1h = %s, want the 1s cap", got)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"":                              0,
		"3":                             3 * time.Second,
		"-1":                            0,
		"soon":                          0,
		"Thu, 01 Jan 2026 12:00:10 GMT": 10 * time.Second,
		"Thu, 01 Jan 2026 11:00:00 GMT": 0,
	} {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestSigningKey(t *testing.T) {
	for in, want := range map[string]string{
		"whsec_" + base64.StdEncoding.EncodeToString([]byte("k1")): "k1",
		"plain":   "plain",
		" plain ": "plain",
	} {
		got, err := signingKey([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("signingKey(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "whsec_!!!"} {
		if _, err := signingKey([]byte(bad)); err == nil {
			t.Errorf("signingKey(%q) succeeded, want an error", bad)
		}
	}
}

// An endpoint that is not an absolute http(s) URL fails at once, and the message does not echo
// the endpoint (which may carry a token).
func TestDeliverInvalidEndpoint(t *testing.T) {
	c := testWebhookClient(loopbackOpen)
	for _, endpoint := range []string{"ftp://hooks.example.com/?token=s3cret", "/relative?token=s3cret", "http://%zz?token=s3cret"} {
		res, err := c.deliver(context.Background(), webhookRequest{ID: "dlv_bad", Phase: "afterInstall", Endpoint: endpoint, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if res.Delivered || res.Attempts != 1 || !strings.Contains(res.Message, "invalid") || strings.Contains(res.Message, "s3cret") {
			t.Errorf("%s: result = %+v, want one invalid attempt without the token", endpoint, res)
		}
	}
}
