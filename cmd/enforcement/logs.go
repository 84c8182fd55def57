package main

import (
	"io"
	"log/slog"
	"sync"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// controller-runtime (through envtest and its client) logs to a logger that must be set before
// it first logs. Unset, its first log line 30 seconds or more after the process started prints
// "log.SetLogger(...) was never called" with a stack trace to the process's stderr: in the middle
// of the local mode's narration on a first run, which spends minutes building kube-apiserver.
// The logger is set at start-up, before anything can log, and writes errors only to the stderr
// of the running command; the rest (progress lines) would interrupt the narration.
func init() {
	ctrllog.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(controllerRuntimeOut, &slog.HandlerOptions{Level: slog.LevelError})))
}

// controllerRuntimeOut is where controller-runtime's log goes: the stderr of the command being
// run, nowhere before run sets it.
var controllerRuntimeOut = &switchWriter{}

// switchWriter writes to the writer last set, or discards while none is.
type switchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// set makes w the destination of later writes.
func (s *switchWriter) set(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w = w
}

func (s *switchWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return len(p), nil
	}
	return s.w.Write(p)
}
