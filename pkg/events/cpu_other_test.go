//go:build !unix

package events

import "time"

// processCPU returns 0: the process's CPU time is read on Unix systems only.
func processCPU() time.Duration { return 0 }
