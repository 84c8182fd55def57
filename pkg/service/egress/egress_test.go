package egress

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func prefixes(t testing.TB, list string) []netip.Prefix {
	t.Helper()
	p, err := ParseNetworks("TEST", list)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Every range of the default list is refused as itself, in its IPv4-mapped form and in both
// NAT64 forms; the addresses next to each range are allowed.
func TestDefaultDeniedRanges(t *testing.T) {
	tests := []struct {
		name            string
		denied, allowed []string
	}{
		{"unspecified", []string{"0.0.0.0", "0.255.255.255", "::"}, []string{"1.0.0.1"}},
		{"loopback", []string{"127.0.0.1", "127.255.0.9", "::1"}, []string{"126.255.255.255", "128.0.0.1", "::2"}},
		{"RFC 1918 10/8", []string{"10.0.0.1", "10.255.255.255"}, []string{"9.255.255.255", "11.0.0.1"}},
		{"RFC 1918 172.16/12", []string{"172.16.0.1", "172.31.255.255"}, []string{"172.15.255.255", "172.32.0.0"}},
		{"RFC 1918 192.168/16", []string{"192.168.0.1", "192.168.255.255"}, []string{"192.167.255.255", "192.169.0.0"}},
		{"CGNAT 100.64/10", []string{"100.64.0.1", "100.127.255.255"}, []string{"100.63.255.255", "100.128.0.0"}},
		{"link-local", []string{"169.254.0.1", "169.254.255.255", "fe80::1", "fe80::1%eth0", "febf::1"}, []string{"169.253.255.255", "169.255.0.0", "fec0::1"}},
		{"unique local", []string{"fc00::1", "fd12:3456::1", "fdff:ffff::1"}, []string{"fbff::1", "fe00::1"}},
		{"metadata", []string{"169.254.169.254", "169.254.170.2", "169.254.170.23", "100.100.100.200", "168.63.129.16", "fd00:ec2::254", "fd00:ec2::23", "fd20:ce::254"}, []string{"168.63.129.15", "168.63.129.17"}},
		{"public", nil, []string{"8.8.8.8", "203.0.113.9", "2001:db8::1", "2606:4700::1111"}},
	}
	var p Policy
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, s := range tt.denied {
				for _, form := range forms(s) {
					if err := p.Check(netip.MustParseAddr(form)); !errors.Is(err, ErrRefused) {
						t.Errorf("Check(%s) = %v, want refused", form, err)
					}
				}
			}
			for _, s := range tt.allowed {
				// The /64 form is left out: a network address such as 11.0.0.0 written that way
				// reads as 0.0.0.0 under the /96 layout, and an ambiguous address is refused.
				for _, form := range forms(s)[:min(4, len(forms(s)))] {
					if err := p.Check(netip.MustParseAddr(form)); err != nil {
						t.Errorf("Check(%s) = %v, want allowed", form, err)
					}
				}
			}
		})
	}
}

// forms is an address as written, plus, for IPv4, its IPv4-mapped form, its NAT64 form under the
// well-known prefix, and under the local-use prefix with a /96 and (last) a /64 layout (RFC 6052).
func forms(s string) []string {
	a := netip.MustParseAddr(strings.Split(s, "%")[0])
	if !a.Is4() {
		return []string{s}
	}
	b := a.As4()
	var local64 [16]byte
	copy(local64[:], netip.MustParseAddr("64:ff9b:1:aaaa::").AsSlice())
	copy(local64[9:13], b[:])
	return []string{s, "::ffff:" + s, "64:ff9b::" + s, "64:ff9b:1:aaaa::" + s, netip.AddrFrom16(local64).String()}
}

// The most specific network decides: the operator's Allowed opens a default range but not a
// metadata address inside it; naming the address opens it; Denied refuses more and beats an
// equal Allowed entry; Denied everything plus Allowed one network allows that network alone.
func TestPolicyMostSpecificDecides(t *testing.T) {
	tests := []struct {
		name            string
		policy          Policy
		allowed, denied []string
	}{
		{"allow loopback", Policy{Allowed: prefixes(t, "127.0.0.0/8,::1")},
			[]string{"127.0.0.1", "::ffff:127.0.0.1", "64:ff9b::127.0.0.1", "::1"}, []string{"10.0.0.1", "::"}},
		{"allow link-local keeps metadata", Policy{Allowed: prefixes(t, "169.254.0.0/16,100.64.0.0/10")},
			[]string{"169.254.1.1", "100.64.0.1"}, []string{"169.254.169.254", "100.100.100.200", "64:ff9b::169.254.169.254"}},
		{"allow the metadata address itself", Policy{Allowed: prefixes(t, "169.254.169.254")},
			[]string{"169.254.169.254"}, []string{"169.254.1.1"}},
		{"allow everything still keeps the defaults", Policy{Allowed: prefixes(t, "0.0.0.0/0,::/0")},
			[]string{"8.8.8.8"}, []string{"127.0.0.1", "10.0.0.1"}},
		{"deny more", Policy{Denied: prefixes(t, "203.0.113.0/24")},
			[]string{"203.0.114.1"}, []string{"203.0.113.7", "::ffff:203.0.113.7", "64:ff9b::203.0.113.7"}},
		{"denied wins a tie", Policy{Allowed: prefixes(t, "10.0.0.0/8"), Denied: prefixes(t, "10.0.0.0/8")},
			nil, []string{"10.0.0.1"}},
		{"allow-list only", Policy{Denied: prefixes(t, "0.0.0.0/0,::/0"), Allowed: prefixes(t, "203.0.113.0/24,10.1.0.0/16")},
			[]string{"203.0.113.7", "10.1.2.3"}, []string{"8.8.8.8", "2001:db8::1", "10.2.0.1"}},
		{"NAT64 to an allowed private address", Policy{Allowed: prefixes(t, "10.0.0.0/8")},
			[]string{"64:ff9b::10.0.0.1"}, []string{"64:ff9b::192.168.0.1"}},
		{"NAT64 prefix denied by the operator", Policy{Denied: prefixes(t, "64:ff9b::/96")},
			nil, []string{"64:ff9b::8.8.8.8"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, s := range tt.allowed {
				if err := tt.policy.Check(netip.MustParseAddr(s)); err != nil {
					t.Errorf("Check(%s) = %v, want allowed", s, err)
				}
			}
			for _, s := range tt.denied {
				if err := tt.policy.Check(netip.MustParseAddr(s)); !errors.Is(err, ErrRefused) {
					t.Errorf("Check(%s) = %v, want refused", s, err)
				}
			}
		})
	}
}

// The error names the deciding network and what lives there.
func TestCheckErrorNamesTheNetwork(t *testing.T) {
	err := Policy{Allowed: prefixes(t, "169.254.0.0/16")}.Check(netip.MustParseAddr("::ffff:169.254.169.254"))
	if err == nil || !strings.Contains(err.Error(), "169.254.169.254 is in 169.254.169.254/32 cloud metadata") {
		t.Errorf("error = %v", err)
	}
	err = Policy{}.Check(netip.MustParseAddr("64:ff9b::10.1.2.3"))
	if err == nil || !strings.Contains(err.Error(), "10.1.2.3 is in 10.0.0.0/8 private (RFC 1918) (NAT64 address 64:ff9b::a01:203)") {
		t.Errorf("NAT64 error = %v", err)
	}
}

func TestControl(t *testing.T) {
	var p Policy
	for address, ok := range map[string]bool{
		"127.0.0.1:80":             false,
		"[::1]:443":                false,
		"[fe80::1%eth0]:80":        false,
		"[::ffff:10.0.0.1]:80":     false,
		"203.0.113.7:80":           true,
		"[2001:db8::1]:80":         true,
		"example.com:80":           false, // never a name after resolution: refused, not guessed
		"203.0.113.7":              false, // no port
		"[64:ff9b::7f00:1]:8080":   false,
		"[64:ff9b::cb00:7107]:443": true,
	} {
		if err := p.Control("tcp", address, nil); (err == nil) != ok {
			t.Errorf("Control(%s) = %v, want allowed=%v", address, err, ok)
		}
	}
}

func TestParseNetworks(t *testing.T) {
	got, err := ParseNetworks("X", " 10.1.2.3/8, 192.168.1.7 ,::1, ::ffff:172.16.0.0/108,,fd00::/8")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32"),
		netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("172.16.0.0/12"), netip.MustParsePrefix("fd00::/8")}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseNetworks = %v, want %v", got, want)
	}
	for _, bad := range []string{"example.com", "10.0.0.0/33", "fe80::1%eth0", "::ffff:0:0/90"} {
		if _, err := ParseNetworks("TRIGGER_ALLOWED_NETWORKS", bad); err == nil || !strings.Contains(err.Error(), "TRIGGER_ALLOWED_NETWORKS") {
			t.Errorf("ParseNetworks(%q) = %v, want an error naming the variable", bad, err)
		}
	}
	if got, err := ParseNetworks("X", ""); got != nil || err != nil {
		t.Errorf("empty = %v, %v", got, err)
	}
}

func TestFromEnv(t *testing.T) {
	env := map[string]string{"A": "127.0.0.0/8", "D": "203.0.113.0/24"}
	p, err := FromEnv(func(k string) string { return env[k] }, "A", "D")
	if err != nil || len(p.Allowed) != 1 || len(p.Denied) != 1 {
		t.Fatalf("FromEnv = %+v, %v", p, err)
	}
	env["D"] = "none"
	if _, err := FromEnv(func(k string) string { return env[k] }, "A", "D"); err == nil || !strings.Contains(err.Error(), "D=none") || !strings.Contains(err.Error(), "with A") {
		t.Errorf("none: %v", err)
	}
	env["A"] = "10.0.0.0/40"
	if _, err := FromEnv(func(k string) string { return env[k] }, "A", "D"); err == nil || !strings.Contains(err.Error(), "A:") {
		t.Errorf("bad allowed: %v", err)
	}
}

// A real HTTP client on Transport: a host name that resolves to loopback is refused at dial time
// and the server never sees a request; the allow-list opens it; a redirect from an allowed server
// to a denied address is refused by the same dial check, and the denied server sees nothing.
func TestTransportRefusesAtDialTimeAndOnRedirects(t *testing.T) {
	var deniedCalls atomic.Int32
	denied := listen(t, "127.0.0.2:0", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		deniedCalls.Add(1)
		_, _ = w.Write([]byte("secret"))
	}))
	var allowedCalls atomic.Int32
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		allowedCalls.Add(1)
		if r.URL.Path == "/away" {
			http.Redirect(w, r, denied+"/latest/meta-data/", http.StatusFound)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(allowed.Close)
	port := allowed.URL[strings.LastIndex(allowed.URL, ":"):]

	get := func(p Policy, url string) (string, error) {
		c := &http.Client{Transport: p.Transport(), Timeout: 5 * time.Second}
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
		resp, err := c.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b := make([]byte, 16)
		n, _ := resp.Body.Read(b)
		return string(b[:n]), nil
	}

	// By default, localhost (a name) and 127.0.0.1 are refused before any byte is sent.
	for _, url := range []string{"http://localhost" + port + "/", allowed.URL + "/"} {
		if _, err := get(Policy{}, url); !errors.Is(err, ErrRefused) {
			t.Errorf("default policy GET %s: %v, want refused", url, err)
		}
	}
	if n := allowedCalls.Load(); n != 0 {
		t.Fatalf("server called %d times through a refused dial", n)
	}
	// The allow-list opens exactly 127.0.0.1 (and ::1 for a localhost that resolves to it).
	open := Policy{Allowed: prefixes(t, "127.0.0.1,::1")}
	if body, err := get(open, "http://localhost"+port+"/"); err != nil || body != "ok" {
		t.Errorf("allowed GET via localhost = %q, %v", body, err)
	}
	// 127.0.0.2 is still loopback and denied: the redirect's dial is refused.
	if body, err := get(open, allowed.URL+"/away"); !errors.Is(err, ErrRefused) {
		t.Errorf("redirect to %s: body %q, err %v; want refused", denied, body, err)
	}
	if n := deniedCalls.Load(); n != 0 {
		t.Errorf("denied server called %d times", n)
	}
	// Opening 127.0.0.2 too lets the redirect through: it was the policy that stopped it.
	both := Policy{Allowed: prefixes(t, "127.0.0.1,127.0.0.2,::1")}
	if body, err := get(both, allowed.URL+"/away"); err != nil || body != "secret" {
		t.Errorf("redirect with both allowed = %q, %v", body, err)
	}
}

// listen serves h on addr and returns its base URL.
func listen(t *testing.T, addr string, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}
