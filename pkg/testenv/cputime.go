package testenv

import (
	"syscall"
	"testing"
	"time"
)

// CPUTime returns the process's user+system CPU time. Benchmarks report it per operation
// because on a shared machine wall time per operation mostly measures the neighbours, while CPU
// time measures the work.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ReportCPU adds the metric cpu-ms/op to b: the process CPU time spent since start (a value of
// CPUTime) divided by the n iterations run since then.
func ReportCPU(b *testing.B, start time.Duration, n int) {
	b.ReportMetric(float64(CPUTime()-start)/float64(time.Millisecond)/float64(n), "cpu-ms/op")
}
