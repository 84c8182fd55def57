package scanner

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"
)

// SourceID returns the stable identity of a cluster source: the first 16 hex characters of
// sha256("kind\x00secretNamespace\x00secretName\x00" + "k=v\x00" for every filter, sorted by key).
// Two ClusterRules with the same kind, Secret and filters share one source, one inventory and
// one scan. rule-engine computes the same id from a rule's spec to find the events of its source,
// so the algorithm must not change (it is a candidate to move into pkg/events).
//
// A NUL byte cannot occur in Kubernetes names or sensible filter values, so the separators keep
// ("a", "bc") and ("ab", "c") apart.
func SourceID(kind, secretNamespace, secretName string, filters map[string]string) string {
	h := sha256.New()
	for _, s := range []string{kind, secretNamespace, secretName} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	keys := make([]string, 0, len(filters))
	for k := range filters {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		h.Write([]byte(k + "=" + filters[k]))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
