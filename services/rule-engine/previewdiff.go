package main

import (
	"strings"

	"github.com/enforcement-io/enforcement/pkg/events"
	"sigs.k8s.io/yaml"
)

// specDiff is the line diff of two rendered specs as YAML: "- " lines only before, "+ " lines
// only after, "  " lines in both. A nil spec is empty (a create, a delete, or a spec no longer
// known); "" when both are equal.
func specDiff(before, after *events.Enforcement) string {
	a, b := specLines(before), specLines(after)
	if strings.Join(a, "\n") == strings.Join(b, "\n") {
		return ""
	}
	return strings.Join(lineDiff(a, b), "\n") + "\n"
}

func specLines(en *events.Enforcement) []string {
	if en == nil {
		return nil
	}
	out, err := yaml.Marshal(en)
	if err != nil { // an Enforcement is plain data: this does not happen
		return []string{"<" + err.Error() + ">"}
	}
	return strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
}

// lineDiff is the classic longest-common-subsequence diff. Specs are a few dozen lines, so the
// quadratic table costs nothing worth a smarter algorithm.
func lineDiff(a, b []string) []string {
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			out = append(out, "  "+a[i])
			i++
			j++
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			out = append(out, "- "+a[i]) // removals first, as diff -u shows them
			i++
		default:
			out = append(out, "+ "+b[j])
			j++
		}
	}
	return out
}
