package events

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxNameLength is the longest Application or AppProject name Enforcement writes. Argo CD tracks
// resources with the Application name in a label value, which Kubernetes limits to 63 characters.
const MaxNameLength = 63

// ApplicationName is the Argo CD Application name of one (cluster, enforcement) pair: the
// original operator's "<cluster>-<enforcement>". It is part of the contract because several
// services (argo-syncer, trigger-dispatcher, rule-engine) must agree on it.
func ApplicationName(cluster, enforcement string) string {
	return ObjectName(cluster + "-" + enforcement)
}

// ObjectName returns name unchanged when it is a valid DNS-1123 label of at most MaxNameLength
// characters. Otherwise it lower-cases it, replaces every character outside [a-z0-9-] with '-',
// trims '-' at both ends, and, because that may make two names equal or the name too long, cuts
// it to fit and appends "-" and the first 8 hex digits of the SHA-256 of the original name.
// The result is always a valid DNS-1123 label.
func ObjectName(name string) string {
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
	suffix := hex.EncodeToString(sum[:4])
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
