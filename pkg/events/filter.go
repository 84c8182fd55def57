package events

import (
	"fmt"
	"slices"
	"strings"
)

// SubjectFilters returns the subject filters that select, in the ENFORCEMENT stream, the events
// of the given types (every type when none is given) whose subject keys have the bound values.
// bind maps a parameter of the catalog's subject patterns (cluster, rule, ruleNamespace,
// sourceKind, sourceId, phase) to a value. A type whose subject lacks one of the bound
// parameters cannot be told apart by subject and is left out; the result is empty when no type
// has them all. Unknown types or parameters are errors, so a typo never reads as "no events".
func SubjectFilters(types []string, bind map[string]string) ([]string, error) {
	for _, t := range types {
		if byType[t] == nil {
			return nil, fmt.Errorf("unknown event type %q", t)
		}
	}
	for p := range bind {
		if !slices.ContainsFunc(catalog, func(d descriptor) bool { return slices.Contains(d.Subject, "{"+p+"}") }) {
			return nil, fmt.Errorf("no event subject has the key %q", p)
		}
	}
	var out []string
	for _, d := range catalog {
		if len(types) > 0 && !slices.Contains(types, d.Type) {
			continue
		}
		hasAll := true
		for p := range bind {
			hasAll = hasAll && slices.Contains(d.Subject, "{"+p+"}")
		}
		if hasAll {
			out = append(out, filterOf(d.Subject, bind))
		}
	}
	return out, nil
}

// TypeNamed returns the event type a short name stands for: "install.succeeded" is
// "io.enforcement.install.succeeded.v1"; a full type name is returned as it is.
func TypeNamed(name string) (string, error) {
	if byType[name] != nil {
		return name, nil
	}
	full := "io.enforcement." + strings.TrimSuffix(name, ".v1") + ".v1"
	if byType[full] == nil {
		return "", fmt.Errorf("unknown event type %q (want a name such as install.succeeded or %s)", name, catalog[0].Type)
	}
	return full, nil
}
