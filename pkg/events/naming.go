package events

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxNameLength is the longest Application or AppProject name Enforcement writes. Argo CD tracks
// resources with the Application name in a label value, which Kubernetes limits to 63 characters.
const MaxNameLength = 63

// Hash suffix lengths of normalised names, in hex digits. NameSuffixDigits (64 bits) makes a
// collision of two normalised names a matter of about 2^64 tries for a chosen name (2^32 for any
// two), out of reach of anyone who can only name clusters and enforcements. LegacySuffixDigits
// (32 bits) is what versions before it wrote; a collision at that length can be found on a
// laptop in seconds.
const (
	NameSuffixDigits   = 16
	LegacySuffixDigits = 8
)

// ApplicationName is the Argo CD Application name of one (cluster, enforcement) pair: the
// original operator's "<cluster>-<enforcement>". It is part of the contract because several
// services (argo-syncer, trigger-dispatcher, rule-engine) must agree on it.
func ApplicationName(cluster, enforcement string) string {
	return ObjectName(cluster + "-" + enforcement)
}

// LegacyApplicationName is ApplicationName as versions before 64-bit suffixes computed it
// (LegacyObjectName): argo-syncer looks Applications up under it, so that the ones written then
// are kept rather than duplicated. Equal to ApplicationName when the name needs no normalising.
func LegacyApplicationName(cluster, enforcement string) string {
	return LegacyObjectName(cluster + "-" + enforcement)
}

// ObjectName returns name unchanged when it is a valid DNS-1123 label of at most MaxNameLength
// characters. Otherwise it lower-cases it, replaces every character outside [a-z0-9-] with '-',
// trims '-' at both ends, and, because that may make two names equal or the name too long, cuts
// it to fit and appends "-" and the first NameSuffixDigits hex digits (64 bits) of the SHA-256
// of the original name. The result is always a valid DNS-1123 label.
func ObjectName(name string) string {
	return normalise(name, NameSuffixDigits)
}

// LegacyObjectName is ObjectName with the 32-bit suffix (LegacySuffixDigits) of earlier
// versions. It names nothing new: argo-syncer finds the objects written under those names
// (services/argo-syncer names.go), and source-scanner recognises the names those versions gave
// EKS and GKE clusters, which keep them (a cluster's name is its Argo CD destination and its
// objects' names), while a cluster first seen now gets ObjectName (services/source-scanner
// internal/scanner names.go).
func LegacyObjectName(name string) string {
	return normalise(name, LegacySuffixDigits)
}

// normalise is ObjectName with a suffix of digits hex digits.
func normalise(name string, digits int) string {
	if isDNSLabel(name) {
		return name
	}
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	sum := sha256.Sum256([]byte(name))
	suffix := hex.EncodeToString(sum[:])[:digits]
	base := strings.Trim(b.String(), "-")
	if limit := MaxNameLength - len(suffix) - 1; len(base) > limit {
		base = strings.TrimRight(base[:limit], "-")
	}
	if base == "" {
		return "x-" + suffix
	}
	return base + "-" + suffix
}

func isDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > MaxNameLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return s[0] != '-' && s[len(s)-1] != '-'
}
