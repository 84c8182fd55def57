// Package egress keeps the outbound HTTP calls a rule author controls (trigger webhooks, template
// requests.get) away from the inside of the network they run in.
//
// A ClusterRule may name any URL. Without a guard, a rule could make a service call its own
// loopback, the cluster's private services, or the cloud metadata service, and read credentials
// back (into a rendered field, or as a webhook's answer). A Policy refuses, by default, the
// networks in DefaultDenied: loopback, unspecified, RFC 1918, CGNAT, link-local, IPv6 unique-local
// and the cloud metadata addresses, also when written in their IPv4-mapped (::ffff:a.b.c.d) or
// NAT64 (64:ff9b::a.b.c.d) forms. Only the operator opens them, with Policy.Allowed.
//
// The check runs in the dialer's Control hook (Policy.Control, used by Policy.Transport), that is
// on the address actually being connected to after DNS resolution: a name that resolves, or
// re-resolves between a check and the connection (DNS rebinding), to a denied address is refused
// like the literal address, and so is every redirect a client follows through the same transport.
// The transport uses no proxy: through a proxy, the dialer would only ever see the proxy.
//
// This is a small piece of hand-written code rather than a library on purpose: the rule (the most
// specific matching network decides) fits in one function, and it is tested range by range.
package egress

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// ErrRefused marks a connection the policy refused. Retrying cannot help: the policy says the
// same next time.
var ErrRefused = errors.New("address refused by the network policy")

// Network is one entry of the default denied list, with the reason it is denied.
type Network struct {
	// Prefix is the denied network; a single address is a /32 or /128.
	Prefix netip.Prefix
	// Reason says what lives there, for errors and docs.
	Reason string
}

// defaultDenied is the list DefaultDenied returns. The metadata addresses are listed on their
// own although their networks are denied too: the most specific entry decides, so an operator
// who opens 169.254.0.0/16 or 100.64.0.0/10 still does not open the metadata service in it.
var defaultDenied = []Network{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified (this host)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private (RFC 1918)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private (RFC 1918)"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private (RFC 1918)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (CGNAT, RFC 6598)"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("169.254.169.254/32"), "cloud metadata (AWS, GCP, Azure, OpenStack, Oracle)"},
	{netip.MustParsePrefix("169.254.170.2/32"), "cloud metadata (AWS ECS task credentials)"},
	{netip.MustParsePrefix("169.254.170.23/32"), "cloud metadata (AWS EKS Pod Identity)"},
	{netip.MustParsePrefix("100.100.100.200/32"), "cloud metadata (Alibaba Cloud)"},
	{netip.MustParsePrefix("168.63.129.16/32"), "cloud platform (Azure WireServer)"},
	{netip.MustParsePrefix("::/128"), "unspecified (this host)"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fc00::/7"), "unique local"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "cloud metadata (AWS IPv6)"},
	{netip.MustParsePrefix("fd00:ec2::23/128"), "cloud metadata (AWS EKS Pod Identity IPv6)"},
	{netip.MustParsePrefix("fd20:ce::254/128"), "cloud metadata (GCP IPv6)"},
}

// DefaultDenied returns the networks every Policy refuses unless Allowed opens them. The
// IPv4-mapped forms of the IPv4 entries (::ffff:0:0/96) and their NAT64 forms (64:ff9b::/96,
// 64:ff9b:1::/48) are refused through the IPv4 entry: Check looks at the embedded address.
func DefaultDenied() []Network { return append([]Network(nil), defaultDenied...) }

// Policy decides which addresses outbound calls may connect to. The zero Policy refuses the
// DefaultDenied networks and allows everything else.
//
// For an address, the most specific network that contains it, among DefaultDenied, Allowed and
// Denied, decides; on a tie Denied wins over Allowed, and Allowed over DefaultDenied. So
// Allowed "10.0.0.0/8" opens the private network 10/8, Allowed "169.254.0.0/16" opens link-local
// but not 169.254.169.254 (only naming that address opens it), and Denied "0.0.0.0/0, ::/0" with
// Allowed "203.0.113.0/24" allows that network alone.
type Policy struct {
	// Allowed are networks the operator opens, typically where their own receivers live.
	Allowed []netip.Prefix
	// Denied are networks the operator refuses in addition to DefaultDenied.
	Denied []netip.Prefix
}

// Check returns nil when addr may be reached, and an error wrapping ErrRefused that names the
// deciding network otherwise. An IPv4-mapped address is checked as its IPv4 address, a zoned one
// without its zone, and a NAT64 address both as itself and as the IPv4 address it embeds.
func (p Policy) Check(addr netip.Addr) error {
	// netip's Contains never matches a mapped address against an IPv4 prefix, nor a zoned one.
	addr = addr.Unmap().WithZone("")
	if err := p.decide(addr); err != nil {
		return err
	}
	for _, v4 := range embeddedIPv4(addr) {
		if err := p.decide(v4); err != nil {
			return fmt.Errorf("%w (NAT64 address %s)", err, addr)
		}
	}
	return nil
}

// decide applies the most-specific-match rule to one address.
func (p Policy) decide(addr netip.Addr) error {
	best, allowed, why := -1, true, ""
	consider := func(prefix netip.Prefix, allow bool, reason string) {
		if prefix.Contains(addr) && prefix.Bits() >= best {
			best, allowed, why = prefix.Bits(), allow, prefix.String()+" "+reason
		}
	}
	// Later lists win ties (>=): defaults, then the operator's Allowed, then Denied.
	for _, n := range defaultDenied {
		consider(n.Prefix, false, n.Reason)
	}
	for _, a := range p.Allowed {
		consider(a, true, "")
	}
	for _, d := range p.Denied {
		consider(d, false, "denied by the operator")
	}
	if allowed {
		return nil
	}
	return fmt.Errorf("%w: %s is in %s", ErrRefused, addr, why)
}

// NAT64 prefixes: the well-known prefix (RFC 6052) and the local-use prefix (RFC 8215).
var (
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")
	nat64LocalUse  = netip.MustParsePrefix("64:ff9b:1::/48")
)

// embeddedIPv4 returns the IPv4 addresses a NAT64 address may translate to. The well-known prefix
// is always a /96: the last four bytes. A translator in the local-use /48 may use any RFC 6052
// prefix length from 48 to 96, which places the IPv4 bytes differently (byte 8 skipped, the
// bytes after the IPv4 address zero); the /96 reading is always returned, and the /48, /56 and
// /64 readings whenever the address has their shape, so that an address is allowed only if
// every reading a translator could apply to it is allowed.
func embeddedIPv4(addr netip.Addr) []netip.Addr {
	b := addr.As16()
	last4 := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	switch {
	case nat64WellKnown.Contains(addr):
		return []netip.Addr{last4}
	case nat64LocalUse.Contains(addr):
		out := []netip.Addr{last4}
		zeroFrom := func(i int) bool { return b[8] == 0 && allZero(b[i:]) }
		if zeroFrom(13) {
			out = append(out, netip.AddrFrom4([4]byte{b[9], b[10], b[11], b[12]})) // /64
		}
		if zeroFrom(12) {
			out = append(out, netip.AddrFrom4([4]byte{b[7], b[9], b[10], b[11]})) // /56
		}
		if zeroFrom(11) {
			out = append(out, netip.AddrFrom4([4]byte{b[6], b[7], b[9], b[10]})) // /48
		}
		return out
	}
	return nil
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// Control is a net.Dialer Control function: it checks the address being connected to (an IP
// and port, after DNS resolution) and refuses the connection when the policy does not allow it.
func (p Policy) Control(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrRefused, address, err)
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%w: %s is not an IP address", ErrRefused, host)
	}
	return p.Check(addr)
}

// Transport returns an HTTP transport whose every connection, redirects included, is checked by
// the policy. It uses no proxy (HTTP_PROXY and friends are ignored): the policy must see the
// real target. Timeouts of a whole request are the caller's (a context or http.Client.Timeout).
func (p Policy) Transport() *http.Transport {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: p.Control}
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// FromEnv reads a Policy from two environment variables: allowedVar opens networks, deniedVar
// refuses more; both are comma-separated CIDR prefixes or single addresses, and empty by
// default. Errors name the variable. "none", which once switched the default list off, is an
// error that says to open networks with allowedVar instead.
func FromEnv(getenv func(string) string, allowedVar, deniedVar string) (Policy, error) {
	var p Policy
	var err error
	if p.Allowed, err = ParseNetworks(allowedVar, getenv(allowedVar)); err != nil {
		return p, err
	}
	if strings.TrimSpace(getenv(deniedVar)) == "none" {
		return p, fmt.Errorf("%s=none: the default denied networks cannot be switched off; open the networks your receivers live in with %s", deniedVar, allowedVar)
	}
	if p.Denied, err = ParseNetworks(deniedVar, getenv(deniedVar)); err != nil {
		return p, err
	}
	return p, nil
}

// ParseNetworks parses a comma-separated list of CIDR prefixes or single addresses (a single
// address is its /32 or /128; an IPv4-mapped one is its IPv4 address). An empty list is nil.
// Errors name the variable name.
func ParseNetworks(name, list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if !strings.Contains(item, "/") {
			addr, err := netip.ParseAddr(item)
			if err != nil || addr.Zone() != "" {
				return nil, fmt.Errorf("%s: %q is neither a CIDR prefix nor an IP address", name, item)
			}
			addr = addr.Unmap()
			out = append(out, netip.PrefixFrom(addr, addr.BitLen()))
			continue
		}
		prefix, err := netip.ParsePrefix(item)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a CIDR prefix: %w", name, item, err)
		}
		if prefix.Addr().Is4In6() {
			// ::ffff:10.0.0.0/104 means 10.0.0.0/8: addresses are unmapped before the check.
			if prefix.Bits() < 96 {
				return nil, fmt.Errorf("%s: %q spans more than the IPv4-mapped range; write the IPv4 network", name, item)
			}
			prefix = netip.PrefixFrom(prefix.Addr().Unmap(), prefix.Bits()-96)
		}
		out = append(out, prefix.Masked())
	}
	return out, nil
}
