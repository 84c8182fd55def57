package service

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMemoryLimitFollowsTheContainer: the runtime's memory limit is 90 % of the container's, read
// from cgroup v2 or v1; no limit, no control group or GOMEMLIMIT set leave the runtime alone; a
// control group file that holds no limit is a clear warning and changes nothing.
func TestMemoryLimitFollowsTheContainer(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name       string
		files      map[string]string
		gomemlimit string
		want       int64
		log        string
	}{
		{name: "cgroup v2", files: map[string]string{"memory.max": "268435456\n"}, want: 256 * mib * 9 / 10,
			log: `"msg":"Go memory limit set below the container's","service":"test","limitBytes":241591910,"containerLimitBytes":268435456`},
		{name: "cgroup v2 without a limit", files: map[string]string{"memory.max": "max\n"}},
		{name: "cgroup v1", files: map[string]string{"memory/memory.limit_in_bytes": "536870912\n"}, want: 512 * mib * 9 / 10,
			log: `"containerLimitBytes":536870912`},
		{name: "cgroup v1 without a limit", files: map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}},
		{name: "no control group"},
		{name: "GOMEMLIMIT set", files: map[string]string{"memory.max": "268435456\n"}, gomemlimit: "1GiB",
			log: `"msg":"Go memory limit from GOMEMLIMIT","service":"test","GOMEMLIMIT":"1GiB"`},
		{name: "not a limit", files: map[string]string{"memory.max": "lots\n"},
			log: `"level":"WARN","msg":"No Go memory limit: the container's limit cannot be read","service":"test","error":"read the container's memory limit: ` +
				`ROOT/memory.max holds \"lots\", not a number of bytes or \"max\""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for name, content := range tc.files {
				path := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var logs bytes.Buffer
			getenv := func(k string) string {
				if k == "GOMEMLIMIT" {
					return tc.gomemlimit
				}
				return ""
			}
			var set []int64
			got := applyMemoryLimit(getenv, root, func(limit int64) int64 { set = append(set, limit); return 0 }, NewLogger(&logs, "test", getenv))
			if got != tc.want {
				t.Errorf("limit %d, want %d", got, tc.want)
			}
			switch {
			case tc.want == 0 && len(set) != 0:
				t.Errorf("the runtime's limit was set to %v, want it left alone", set)
			case tc.want != 0 && (len(set) != 1 || set[0] != tc.want):
				t.Errorf("the runtime's limit was set to %v, want [%d]", set, tc.want)
			}
			want := strings.ReplaceAll(tc.log, "ROOT", root)
			if tc.log == "" && logs.Len() != 0 || !strings.Contains(logs.String(), want) {
				t.Errorf("log %q, want it to hold %q", logs.String(), want)
			}
		})
	}
}
