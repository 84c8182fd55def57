package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service/egress"
)

// Standard Webhooks headers (https://www.standardwebhooks.com/). webhook-id is sent on every
// delivery, signed or not, so that receivers can deduplicate repeats; the other two only when
// the rule names a signing Secret.
const (
	headerWebhookID        = "webhook-id"
	headerWebhookTimestamp = "webhook-timestamp"
	headerWebhookSignature = "webhook-signature"
)

// maxResponseBody is how much of a response the dispatcher reads (and discards) so that the
// connection can be reused; the rest is dropped with the connection.
const maxResponseBody = 64 << 10

// errShuttingDown ends a delivery that was waiting for its next attempt when the service stops.
// The delivery is not recorded; its event goes back to the server and the next instance repeats
// it with the same id.
var errShuttingDown = errors.New("shutting down")

// webhookRequest is one delivery to make: the same id, body and key for every attempt.
type webhookRequest struct {
	ID       string
	Phase    string
	Endpoint string
	Timeout  time.Duration
	Body     []byte
	// Key, when set, signs every attempt (HMAC-SHA256, Standard Webhooks).
	Key []byte
	// FirstAttempt is the number of the first attempt made here (0 means 1): the retries of a
	// blocked delivery continue the count of its earlier attempts.
	FirstAttempt int
	// Report, when set, is told of every attempt as soon as it is classified. An error ends the
	// delivery with that error (the caller repeats it, with the same id), so no delivery becomes
	// final with an attempt nobody recorded.
	Report func(context.Context, attemptReport) error
}

// attemptReport is one attempt's outcome, as the TriggerAttempted event tells it.
type attemptReport struct {
	Attempt    int
	Result     string
	StatusCode int
	Err        error
	Duration   time.Duration
	WillRetry  bool
	RetryIn    time.Duration
}

// webhookResult is what a delivery came to after all its attempts.
type webhookResult struct {
	Delivered  bool
	StatusCode int    // of the last attempt that got a response; 0 if none did
	Attempts   int    // attempts made, the first included
	Message    string // why it failed (empty when delivered)
}

// webhookClient delivers webhooks: a per-attempt timeout, bounded retries with exponential
// backoff and jitter on connection errors, timeouts, 429 (honouring Retry-After) and 5xx, none on
// other statuses, no redirects, and a network policy checked on the resolved address.
type webhookClient struct {
	http        *http.Client
	maxAttempts int
	backoffBase time.Duration
	backoffMax  time.Duration
	metrics     *metrics
	logger      *slog.Logger
	now         func() time.Time
	// stop is closed at shutdown: a delivery waiting between attempts ends with errShuttingDown.
	stop <-chan struct{}
}

// newHTTPClient returns the client webhooks go through: the egress policy's transport (no proxy,
// the policy checked on every dial) and no redirect followed (a 3xx is the final answer, so a
// receiver cannot bounce the dispatcher to an address the rule did not name).
func newHTTPClient(policy egress.Policy) *http.Client {
	return &http.Client{
		Transport: policy.Transport(),
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// deliver makes attempts until one answers 2xx, one fails in a way retrying cannot fix, or
// maxAttempts are used up, reporting each to req.Report. It returns errShuttingDown (and no
// result) when the service stops while it waits for a retry, ctx's error when ctx ends, and
// Report's error when an attempt could not be reported; every other failure is a result.
func (c *webhookClient) deliver(ctx context.Context, req webhookRequest) (webhookResult, error) {
	var res webhookResult
	first := max(req.FirstAttempt, 1)
	for attempt := 1; ; attempt++ {
		res.Attempts = attempt
		a, took := c.attempt(ctx, req)
		if a.status != 0 {
			res.StatusCode = a.status
		}
		final := a.result == resultSuccess || !a.retryable || attempt >= c.maxAttempts || ctx.Err() != nil
		var wait time.Duration
		if !final {
			wait = c.backoff(attempt, a.retryAfter)
		}
		c.logger.Info("Attempted webhook delivery", "deliveryId", req.ID, "phase", req.Phase,
			"attempt", first+attempt-1, "result", a.result, "statusCode", a.status, "error", errString(a.err),
			"duration", took, "willRetry", !final)
		if req.Report != nil {
			if err := req.Report(ctx, attemptReport{
				Attempt: first + attempt - 1, Result: a.result, StatusCode: a.status, Err: a.err,
				Duration: took, WillRetry: !final, RetryIn: wait,
			}); err != nil {
				return res, fmt.Errorf("record attempt %d of delivery %s: %w", first+attempt-1, req.ID, err)
			}
		}
		if a.result == resultSuccess {
			res.Delivered, res.Message = true, ""
			return res, nil
		}
		res.Message = a.message()
		if !a.retryable || attempt >= c.maxAttempts {
			if a.retryable {
				res.Message = fmt.Sprintf("gave up after %d attempts: %s", attempt, res.Message)
			}
			return res, nil
		}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		// The wait gives the consumer slot back (events.Idle): a receiver that keeps failing
		// holds a slot only during its attempts, never through its backoff.
		stopped := false
		events.Idle(ctx, func() {
			select {
			case <-time.After(wait):
			case <-c.stop:
				stopped = true
			case <-ctx.Done():
			}
		})
		if stopped {
			return res, errShuttingDown
		}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
	}
}

// backoff is the wait before attempt+1: exponential from backoffBase, capped at backoffMax, with
// "equal jitter" (half fixed, half random) so that many deliveries failing together do not retry
// in lockstep. A Retry-After from a 429 or 503 replaces it, capped at backoffMax so the delivery
// stays bounded.
func (c *webhookClient) backoff(attempt int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return min(retryAfter, c.backoffMax)
	}
	d := c.backoffBase
	for i := 1; i < attempt && d < c.backoffMax; i++ {
		d *= 2
	}
	d = min(d, c.backoffMax)
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}

// attemptResult classifies one attempt.
type attemptResult struct {
	result     string
	status     int
	retryable  bool
	retryAfter time.Duration
	err        error
}

// message is the attempt's failure as a short text for the outcome event.
func (a attemptResult) message() string {
	if a.err != nil {
		return a.result + ": " + a.err.Error()
	}
	return fmt.Sprintf("%s: HTTP %d", a.result, a.status)
}

// attempt makes one POST, classifies its outcome and says how long it took.
func (c *webhookClient) attempt(ctx context.Context, req webhookRequest) (attemptResult, time.Duration) {
	start := time.Now()
	a := c.do(ctx, req)
	took := time.Since(start)
	c.metrics.attempt(req.Phase, a.result, took)
	return a, took
}

// do sends the POST and classifies the outcome: 2xx success; 429 and 5xx retryable (with the
// Retry-After of a 429 or 503); 3xx and other 4xx final; a refused address, an invalid URL and
// the caller's own cancellation final; a timeout or connection error retryable. The endpoint is
// never put in an error message, since its query or userinfo may hold a token.
func (c *webhookClient) do(ctx context.Context, req webhookRequest) attemptResult {
	u, err := url.Parse(req.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return attemptResult{result: resultInvalid, err: errors.New("the endpoint is not an absolute http or https URL")}
	}
	actx, cancel := context.WithTimeout(ctx, req.Timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(actx, http.MethodPost, req.Endpoint, bytes.NewReader(req.Body))
	if err != nil {
		return attemptResult{result: resultInvalid, err: trimURLError(err)}
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("User-Agent", "enforcement-trigger-dispatcher")
	hreq.Header.Set(headerWebhookID, req.ID)
	if req.Key != nil {
		ts := strconv.FormatInt(c.now().Unix(), 10)
		hreq.Header.Set(headerWebhookTimestamp, ts)
		hreq.Header.Set(headerWebhookSignature, "v1,"+sign(req.Key, req.ID, ts, req.Body))
	}
	resp, err := c.http.Do(hreq)
	if err != nil {
		switch {
		case errors.Is(err, egress.ErrRefused):
			// The dial error names the address and the network that refused it, never the URL.
			return attemptResult{result: resultRefused, err: trimURLError(err)}
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			return attemptResult{result: resultTimeout, retryable: true, err: fmt.Errorf("no answer within %s", req.Timeout)}
		case ctx.Err() != nil:
			return attemptResult{result: resultConnection, err: ctx.Err()}
		}
		return attemptResult{result: resultConnection, retryable: true, err: trimURLError(err)}
	}
	_, copyErr := io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBody))
	_ = resp.Body.Close()
	if copyErr != nil && errors.Is(copyErr, context.DeadlineExceeded) {
		return attemptResult{result: resultTimeout, status: resp.StatusCode, retryable: true,
			err: fmt.Errorf("response body not read within %s", req.Timeout)}
	}
	a := attemptResult{status: resp.StatusCode}
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
		a.result = resultSuccess
	case s == http.StatusTooManyRequests:
		a.result, a.retryable = resultRateLimited, true
		a.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), c.now())
	case s >= 500:
		a.result, a.retryable = resultServerError, true
		if s == http.StatusServiceUnavailable {
			a.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), c.now())
		}
	case s >= 300 && s < 400:
		a.result = resultRedirect
	default:
		a.result = resultClientError
	}
	return a
}

// sign computes the Standard Webhooks signature: base64 of HMAC-SHA256 over "id.timestamp.body".
func sign(key []byte, id, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// signingKey turns a Secret's "key" value into HMAC key bytes. A Standard Webhooks secret
// ("whsec_" + base64) is decoded as the specification says; any other value is used as is.
func signingKey(value []byte) ([]byte, error) {
	s := strings.TrimSpace(string(value))
	if rest, ok := strings.CutPrefix(s, "whsec_"); ok {
		key, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return nil, errors.New("a whsec_ key must be followed by base64")
		}
		return key, nil
	}
	if s == "" {
		return nil, errors.New("the key is empty")
	}
	return []byte(s), nil
}

// parseRetryAfter reads a Retry-After header: seconds or an HTTP date. 0 when absent or invalid.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// trimURLError drops the "Post "<url>": " prefix of a *url.Error: the URL is logged separately
// where it belongs, and the message gets shorter.
func trimURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// errString is err's text, or "" for nil (for log attributes).
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
