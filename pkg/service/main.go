package service

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Main is a service's main function: it calls run with the process's environment, stdout and
// stderr and a context that SIGINT or SIGTERM cancels, and when run fails it prints
// "<name>: <error>" on stderr and exits with status 1.
func Main(name string, run func(ctx context.Context, getenv Getenv, stdout, stderr io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
