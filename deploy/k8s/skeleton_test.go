package k8s

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// skeletonFiles are the files every service chart shares, differing only in the chart name
// (the prefix of their template definitions). Each chart stays self-contained, without a
// library chart, so this test is what keeps the copies from drifting apart: change one, change
// all.
var skeletonFiles = []string{
	".helmignore",
	"templates/_helpers.tpl",
	"templates/deployment.yaml",
	"templates/service.yaml",
	"templates/serviceaccount.yaml",
	"templates/servicemonitor.yaml",
	"templates/nats-secret.yaml",
	"templates/poddisruptionbudget.yaml",
	"templates/NOTES.txt",
}

func TestChartsShareTheSkeleton(t *testing.T) {
	for _, file := range skeletonFiles {
		var first, firstChart string
		for _, name := range serviceCharts {
			data, err := os.ReadFile(filepath.Join(name, file))
			if err != nil {
				t.Fatal(err)
			}
			generic := strings.ReplaceAll(string(data), `"`+name+`.`, `"CHART.`)
			if firstChart == "" {
				first, firstChart = generic, name
				continue
			}
			if generic != first {
				t.Errorf("%s of %s differs from %s's beyond the chart name", file, name, firstChart)
			}
		}
	}
}
