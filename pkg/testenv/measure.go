package testenv

import (
	"runtime"
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

// LiveHeap returns the bytes of heap in use after a full collection: the memory a benchmark's
// data holds, without the garbage a collection would free.
func LiveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
