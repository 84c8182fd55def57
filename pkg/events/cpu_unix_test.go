//go:build unix

package events

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time the process used so far (user and system), or 0 if unknown.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
