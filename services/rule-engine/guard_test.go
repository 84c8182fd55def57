package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
)

// runawayLoop is a loop that would run for hours: each range stays within its limit, together
// they make 10^8 steps of about 20µs.
const runawayLoop = "${% for i in range(10000) %}${% for j in range(10000) %}${% endfor %}${% endfor %}r"

// settleGoroutines waits until no more goroutines run than baseline, and fails the test with
// the count otherwise.
func settleGoroutines(t *testing.T, baseline int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseline {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines left running, baseline %d:\n%s", runtime.NumGoroutine(), baseline, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunawayTemplateStopsAtTheLimit renders the runaway loop, many at once: each fails with
// the timeout error soon after TEMPLATE_RENDER_TIMEOUT, and once they returned no goroutine of
// theirs is left running.
func TestRunawayTemplateStopsAtTheLimit(t *testing.T) {
	baseline := runtime.NumGoroutine()
	c := cluster("x", nil)
	r := newRenderer(nil, time.Second)
	r.limit = 200 * time.Millisecond
	compiled := compile([]v1beta1.Enforcement{{Name: "a", Repo: runawayLoop}})
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = r.renderSafely(context.Background(), compiled, templateVars(&c))
		}()
	}
	wg.Wait()
	took := time.Since(start)
	t.Logf("8 runaway renders with a 200ms limit returned after %s", took)
	for _, err := range errs {
		if !errors.Is(err, errRenderTimeout) || !isRenderLimit(err) {
			t.Errorf("error = %v, want the timeout", err)
		}
	}
	// Generous: the race detector on a busy machine, and the longest stretch the guard does not
	// see (gonja listing a 10000-item range before the loop body runs), for 8 renders at once.
	if took > 5*time.Second {
		t.Errorf("renders returned after %s, limit 200ms", took)
	}
	settleGoroutines(t, baseline)

	got, err := r.renderSafely(context.Background(), compile([]v1beta1.Enforcement{{Name: "${{ name }}", Repo: "r"}}), templateVars(&c))
	if err != nil || got[0].Name != "x" {
		t.Errorf("normal render: %v, %v", got, err)
	}
}

// TestRenderOutputIsCapped: a template writing more than maxRenderOutput fails with an error
// naming the cap, whether one field or several write it; just under the cap renders.
func TestRenderOutputIsCapped(t *testing.T) {
	c := cluster("x", nil)
	r := newRenderer(nil, time.Second)
	r.limit = 10 * time.Second
	for name, enf := range map[string]v1beta1.Enforcement{
		"one field": {Name: "a", Repo: "${% for i in range(10000) %}${% for j in range(10) %}0123456789${% endfor %}${% endfor %}"},
		"fields together": {Name: "a", Repo: "${% for i in range(10000) %}0123456789${% endfor %}",
			Path: "${% for i in range(10000) %}0123456789${% endfor %}", Namespace: "${% for i in range(10000) %}0123456789${% endfor %}"},
		"one expression": {Name: "a", Repo: "${{ 'x' * 300000 }}"},
	} {
		_, err := r.renderSafely(context.Background(), compile([]v1beta1.Enforcement{enf}), templateVars(&c))
		if !errors.Is(err, errOutputCap) || !strings.Contains(err.Error(), "over the cap of 262144 bytes (256 KiB)") {
			t.Errorf("%s: error = %v, want the output cap", name, err)
		}
	}
	got, err := r.renderSafely(context.Background(), compile([]v1beta1.Enforcement{{Name: "a",
		Repo: "${% for i in range(10000) %}0123456789${% endfor %}"}}), templateVars(&c))
	if err != nil || len(got[0].Repo) != 100000 {
		t.Errorf("under the cap: %d bytes, %v", len(got), err)
	}
}

// TestRangeIsBounded: range beyond Jinja's sandbox limit is a template error at once, not a
// sequence built in the background; within it range works as in Python.
func TestRangeIsBounded(t *testing.T) {
	baseline := runtime.NumGoroutine()
	c := cluster("x", nil)
	r := newRenderer(nil, time.Second)
	_, err := r.renderSafely(context.Background(), compile([]v1beta1.Enforcement{{Name: "a",
		Repo: "${% for i in range(10**10) %}x${% endfor %}"}}), templateVars(&c))
	if err == nil || !strings.Contains(err.Error(), "over the limit of 10000") {
		t.Errorf("range(10**10): error = %v", err)
	}
	got, err := r.renderSafely(context.Background(), compile([]v1beta1.Enforcement{{Name: "a",
		Repo: "${{ range(3)|join(',') }};${{ range(1, 7, 2)|join(',') }};${{ range(5, 0, -2)|join(',') }};${{ range(3, 1)|length }}"}}), templateVars(&c))
	if err != nil || got[0].Repo != "0,1,2;1,3,5;5,3,1;0" {
		t.Errorf("range: %v, %v", got, err)
	}
	// gonja's own range left a goroutine blocked for every loop that stopped early.
	_, err = r.renderSafely(context.Background(), compile([]v1beta1.Enforcement{{Name: "a",
		Repo: "${% for i in range(1000) %}${% if i > 2 %}${% break %}${% endif %}${% endfor %}r"}}), templateVars(&c))
	if err != nil {
		t.Fatal(err)
	}
	settleGoroutines(t, baseline)
}

// TestSlowTemplateHostIsCutAtTheLimit: a requests.get to an allowed host that does not answer
// is cut when the render's TEMPLATE_RENDER_TIMEOUT passes, well before TEMPLATE_HTTP_TIMEOUT:
// the host sees its request end, and the render fails with the timeout error.
func TestSlowTemplateHostIsCutAtTheLimit(t *testing.T) {
	cut := make(chan time.Duration, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		start := time.Now()
		select {
		case <-req.Context().Done():
			cut <- time.Since(start)
		case <-time.After(20 * time.Second):
			cut <- -1
		}
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	c := cluster("x", nil)
	r := newRenderer([]string{u.Hostname()}, 30*time.Second)
	r.useEgress(loopbackOpen) // the test server listens on loopback
	r.limit = 300 * time.Millisecond
	start := time.Now()
	_, err := r.renderSafely(context.Background(), compile([]v1beta1.Enforcement{{Name: "a",
		Repo: "${{ requests.get('" + srv.URL + "/slow').text }}"}}), templateVars(&c))
	took := time.Since(start)
	if !errors.Is(err, errRenderTimeout) {
		t.Errorf("error = %v, want the timeout", err)
	}
	select {
	case d := <-cut:
		t.Logf("render returned after %s; the host saw its request end after %s", took, d)
		if d < 0 || d > 2*time.Second {
			t.Errorf("the host's request ended after %s, want about the 300ms limit", d)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("the host's request still runs 5s after the render returned (%s)", took)
	}
}

// TestRecursiveMacroIsBounded: a macro that calls itself without end is a template error, not
// a process that runs out of stack.
func TestRecursiveMacroIsBounded(t *testing.T) {
	c := cluster("x", nil)
	r := newRenderer(nil, time.Second)
	_, err := r.renderSafely(context.Background(), compile([]v1beta1.Enforcement{{Name: "a",
		Repo: "${% macro f(n) %}${{ f(n + 1) }}${% endmacro %}${{ f(0) }}"}}), templateVars(&c))
	if err == nil || !strings.Contains(err.Error(), "macro calls nested deeper than 100") {
		t.Errorf("error = %v", err)
	}
	got, err := r.renderSafely(context.Background(), compile([]v1beta1.Enforcement{{Name: "a",
		Repo: "${% macro f(n) %}${% if n > 0 %}${{ n }}${{ f(n - 1) }}${% endif %}${% endmacro %}${{ f(3) }}"}}), templateVars(&c))
	if err != nil || got[0].Repo != "321" {
		t.Errorf("bounded recursion: %v, %v", got, err)
	}
}
