package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/service/egress"
)

// loopbackOpen is the egress policy of tests whose servers listen on loopback: the default
// denied list with loopback opened, as the local run command opens it.
var loopbackOpen = egress.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}

// requests.get is checked where it connects, after DNS resolution, whatever the host allow-list
// says: an allowed host name that resolves to loopback is refused and the server sees nothing;
// a redirect from an opened address to a denied one is refused by the same dial check (the host
// allow-list names both, so only the network policy can stop it); the allow-list opens both.
func TestRequestsGetRefusedInsideTheNetwork(t *testing.T) {
	var innerCalls atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	inner := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		innerCalls.Add(1)
		_, _ = w.Write([]byte(`{"AccessKeyId":"leaked"}`))
	})}}
	inner.Start()
	t.Cleanup(inner.Close)
	var outerCalls atomic.Int32
	outer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		outerCalls.Add(1)
		if r.URL.Path == "/away" {
			http.Redirect(w, r, inner.URL+"/latest/meta-data/", http.StatusFound)
			return
		}
		_, _ = w.Write([]byte(`{"AccessKeyId":"public"}`))
	}))
	t.Cleanup(outer.Close)
	port := outer.URL[strings.LastIndex(outer.URL, ":"):]
	c := cluster("x", nil)
	get := func(url string) []v1beta1.Enforcement {
		return []v1beta1.Enforcement{{Name: "a", Repo: "${{ requests.get('" + url + "').json()['AccessKeyId'] }}"}}
	}
	hosts := []string{"localhost", "127.0.0.1", "127.0.0.2"}
	render := func(policy egress.Policy, url string) (string, error) {
		r := newRenderer(hosts, 5*time.Second)
		r.useEgress(policy)
		got, err := r.render(context.Background(), compile(get(url)), templateVars(&c))
		if err != nil {
			return "", err
		}
		return got[0].Repo, nil
	}

	// The default policy: localhost is an allowed host, but it resolves to loopback.
	if repo, err := render(egress.Policy{}, "http://localhost"+port+"/"); err == nil || !strings.Contains(err.Error(), "address refused by the network policy") {
		t.Errorf("localhost under the default policy: %q, %v; want refused", repo, err)
	}
	if n := outerCalls.Load(); n != 0 {
		t.Fatalf("server called %d times through a refused dial", n)
	}
	// The network allow-list opens 127.0.0.1 (and ::1, where localhost resolves to it).
	onlyOuter := egress.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}}
	if repo, err := render(onlyOuter, "http://localhost"+port+"/"); err != nil || repo != "public" {
		t.Errorf("localhost with 127.0.0.1 allowed: %q, %v", repo, err)
	}
	// A redirect to 127.0.0.2, still denied, is refused at its dial.
	if repo, err := render(onlyOuter, outer.URL+"/away"); err == nil || !strings.Contains(err.Error(), "address refused by the network policy") {
		t.Errorf("redirect to a denied address: %q, %v; want refused", repo, err)
	}
	if n := innerCalls.Load(); n != 0 {
		t.Errorf("denied server called %d times after a redirect", n)
	}
	// With 127.0.0.2 opened too, the redirect goes through: the network policy stopped it.
	if repo, err := render(loopbackOpen, outer.URL+"/away"); err != nil || repo != "leaked" {
		t.Errorf("redirect with loopback allowed: %q, %v", repo, err)
	}
}
