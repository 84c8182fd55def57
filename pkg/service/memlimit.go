package service

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The Go runtime does not read a container's memory limit: left alone, it lets the heap grow to
// twice what is live before it collects, and a service holding a large fleet is killed by the
// kernel at its container's limit while half of what it holds is garbage. So Start gives the
// runtime a soft limit of its own (runtime/debug.SetMemoryLimit) below the container's, and the
// runtime collects harder as the heap nears it. GOMEMLIMIT, when set, is the operator's choice
// and is left as it is (the runtime reads it at start; "off" turns the limit off).

// memoryLimitShare is the share of the container's memory limit the runtime is told to keep
// under: the rest is for what the runtime does not count (its own code and stacks, C memory,
// the kernel's page cache charged to the container).
const memoryLimitShare = 0.9

// cgroupRoot is where the container's own control group is mounted.
const cgroupRoot = "/sys/fs/cgroup"

// unlimited is the smallest limit read as none: cgroup v1 writes an unlimited container's as
// the largest page-aligned int64.
const unlimited = int64(1) << 62

// containerMemoryLimit reads the memory limit of the container's control group under root:
// memory.max (cgroup v2; "max" is none) or memory/memory.limit_in_bytes (cgroup v1). It returns
// 0 when there is no limit or no control group file (not in a container), and an error when a
// file holds something else than a limit.
func containerMemoryLimit(root string) (int64, error) {
	for _, file := range []string{"memory.max", filepath.Join("memory", "memory.limit_in_bytes")} {
		path := filepath.Join(root, file)
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("read the container's memory limit: %w", err)
		}
		text := strings.TrimSpace(string(b))
		if text == "max" {
			return 0, nil
		}
		limit, err := strconv.ParseInt(text, 10, 64)
		if err != nil || limit <= 0 {
			return 0, fmt.Errorf("read the container's memory limit: %s holds %q, not a number of bytes or \"max\"", path, text)
		}
		if limit >= unlimited {
			return 0, nil
		}
		return limit, nil
	}
	return 0, nil
}

// applyMemoryLimit sets the runtime's memory limit (through set, runtime/debug.SetMemoryLimit)
// to memoryLimitShare of the container's limit read under root, unless GOMEMLIMIT is set, and
// logs what the limit is and where it comes from. It returns the limit set, 0 when it set none.
// A control group file it cannot read is logged and changes nothing: the service runs as it
// would without a limit.
func applyMemoryLimit(getenv Getenv, root string, set func(int64) int64, logger *slog.Logger) int64 {
	if v := getenv("GOMEMLIMIT"); v != "" {
		logger.Info("Go memory limit from GOMEMLIMIT", "GOMEMLIMIT", v)
		return 0
	}
	container, err := containerMemoryLimit(root)
	if err != nil {
		logger.Warn("No Go memory limit: the container's limit cannot be read", "error", err)
		return 0
	}
	if container == 0 {
		return 0
	}
	limit := int64(float64(container) * memoryLimitShare)
	set(limit)
	logger.Info("Go memory limit set below the container's", "limitBytes", limit, "containerLimitBytes", container)
	return limit
}
