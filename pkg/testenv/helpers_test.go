package testenv

import (
	"net"
	"strconv"
	"testing"
)

// FreeAddr's addresses are distinct and below the kernel's ephemeral range, where no
// outgoing connection takes them.
func TestFreeAddrIsBelowTheEphemeralRange(t *testing.T) {
	low, high := freePortRange()
	seen := map[string]bool{}
	for range 200 {
		addr := FreeAddr(t)
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(port)
		if host != "127.0.0.1" || err != nil || n < low || n >= high {
			t.Fatalf("%s: want 127.0.0.1 and a port in [%d, %d)", addr, low, high)
		}
	}
}
