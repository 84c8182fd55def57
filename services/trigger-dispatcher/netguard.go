package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// errRefusedAddress marks a webhook target the network policy does not allow. It is never
// retried: the policy will say the same next time.
var errRefusedAddress = errors.New("address refused by the network policy")

// netPolicy decides which addresses webhooks may connect to. It is checked in the dialer's
// Control hook, that is on the address actually being connected to after DNS resolution, so a
// name that resolves to a metadata address (or re-resolves to one: DNS rebinding) is refused
// just like the literal address.
type netPolicy struct {
	// Denied networks are refused (by default link-local and the cloud metadata addresses).
	Denied []netip.Prefix
	// Allowed, when not empty, is the only set of networks that may be reached; the denied list
	// applies inside it too.
	Allowed []netip.Prefix
}

// check returns an error wrapping errRefusedAddress when addr may not be reached.
func (p netPolicy) check(addr netip.Addr) error {
	// ::ffff:169.254.169.254 is 169.254.169.254, and a zoned fe80::1%eth0 is fe80::1: netip's
	// Contains never matches a mapped address against an IPv4 prefix nor a zoned one at all.
	addr = addr.Unmap().WithZone("")
	for _, d := range p.Denied {
		if d.Contains(addr) {
			return fmt.Errorf("%w: %s is in denied network %s", errRefusedAddress, addr, d)
		}
	}
	if len(p.Allowed) == 0 {
		return nil
	}
	for _, a := range p.Allowed {
		if a.Contains(addr) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s is in no allowed network", errRefusedAddress, addr)
}

// control is a net.Dialer Control function enforcing the policy on every connection.
func (p netPolicy) control(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", errRefusedAddress, address, err)
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%w: %s is not an IP address", errRefusedAddress, host)
	}
	return p.check(addr)
}
