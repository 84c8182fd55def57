package main

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// TestObjectIdentityGivesBackWhatItRead checks that a cached object's UID and resource version
// read back exactly as the API server (or anything else) gave them, whether they were kept
// compact or as given.
func TestObjectIdentityGivesBackWhatItRead(t *testing.T) {
	for _, tc := range []struct {
		uid      types.UID
		rv       string
		compact  bool
		whatItIs string
	}{
		{"5f0c2a9e-0001-4d1b-9c3e-00000000002a", "123456", true, "the API server's"},
		{"00000000-0000-0000-0000-000000000000", "0", true, "zero UUID, version 0"},
		{"ffffffff-ffff-ffff-ffff-ffffffffffff", "18446744073709551614", true, "the largest kept compact"},
		{"ffffffff-ffff-ffff-ffff-ffffffffffff", "18446744073709551615", false, "a version that does not fit plus one"},
		{"5F0C2A9E-0001-4D1B-9C3E-00000000002A", "7", false, "upper-case UUID"},
		{"5f0c2a9e-0001-4d1b-9c3e-00000000002a", "007", false, "version with leading zeros"},
		{"5f0c2a9e-0001-4d1b-9c3e-00000000002a", "+7", false, "version with a sign"},
		{"5f0c2a9e-0001-4d1b-9c3e-00000000002a", "", false, "no version"},
		{"5f0c2a9e00014d1b9c3e00000000002a0000", "7", false, "no dashes"},
		{"5f0c2a9e-0001-4d1b-9c3e-00000000002g", "7", false, "not hexadecimal"},
		{"argocd-api:https://c1.example", "sha256:0011223344556677", false, "the Argo CD API mode's Secret"},
		{"u-2", "7", false, "a hand-made object's"},
		{"", "", false, "none"},
	} {
		id := newObjectIdentity(tc.uid, tc.rv)
		if got := id.revision != 0; got != tc.compact {
			t.Errorf("%s: kept compact %v, want %v", tc.whatItIs, got, tc.compact)
		}
		if id.UID() != tc.uid || id.ResourceVersion() != tc.rv {
			t.Errorf("%s: reads back %q %q, want %q %q", tc.whatItIs, id.UID(), id.ResourceVersion(), tc.uid, tc.rv)
		}
	}
	if id := newObjectIdentity("", ""); id != (objectIdentity{}) {
		t.Errorf("an empty identity is %+v, want the zero value", id)
	}
}

// TestObjectIdentityOrder checks newerThan and sameObject against the string rule they replace
// (newerVersion on the resource versions, the UIDs compared as strings), compact or not.
func TestObjectIdentityOrder(t *testing.T) {
	const a, b = "5f0c2a9e-0001-4d1b-9c3e-00000000002a", "5f0c2a9e-0001-4d1b-9c3e-00000000002b"
	for _, tc := range []struct {
		uidA, rvA, uidB, rvB string
		newer, same          bool
	}{
		{a, "10", a, "9", true, true},
		{a, "9", a, "10", false, true},
		{a, "9", a, "9", false, true},
		{a, "9", b, "10", true, false},
		{"u-1", "9", "u-1", "10", false, true},
		{"u-1", "10", "u-1", "9", true, true},
		{a, "x", a, "9", true, true},
		{a, "9", "u-1", "9", true, false},
	} {
		x, y := newObjectIdentity(types.UID(tc.uidA), tc.rvA), newObjectIdentity(types.UID(tc.uidB), tc.rvB)
		if got := x.newerThan(y); got != tc.newer {
			t.Errorf("%s@%s newer than %s@%s: %v, want %v", tc.uidA, tc.rvA, tc.uidB, tc.rvB, got, tc.newer)
		}
		if got := x.sameObject(y); got != tc.same {
			t.Errorf("%s@%s same object as %s@%s: %v, want %v", tc.uidA, tc.rvA, tc.uidB, tc.rvB, got, tc.same)
		}
		xm, ym := &cachedMeta{id: x}, &cachedMeta{id: y}
		if got := newer(xm, ym); got != tc.newer {
			t.Errorf("newer(%s@%s, %s@%s) = %v, want %v", tc.uidA, tc.rvA, tc.uidB, tc.rvB, got, tc.newer)
		}
	}
}
