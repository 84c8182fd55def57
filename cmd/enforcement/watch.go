package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// runWatch narrates every event published from now on, one line each, as the local mode does:
// "Discovered cluster demo-eu-1", "Created Application argocd/demo-eu-1-guestbook". The compose
// demo runs it as its narrator service. It keeps trying to reach NATS, so it may start before
// the server; use `nats sub 'enforcement.>'` for the raw events and their headers.
func runWatch(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	url := natsURL(getenv)
	var mu sync.Mutex // the subscription's callbacks and the connection handlers write concurrently
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(stdout, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	nc, err := connectNATS(url, getenv,
		nats.Name("enforcement-watch"),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ConnectHandler(func(*nats.Conn) { say("Watching %s.> on %s", events.SubjectRoot, url) }),
		nats.ReconnectHandler(func(*nats.Conn) { say("Reconnected to %s", url) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				say("Disconnected from %s: %v", url, err)
			}
		}),
	)
	if err != nil {
		return err
	}
	defer nc.Close()
	if nc.IsConnected() {
		say("Watching %s.> on %s", events.SubjectRoot, url)
	} else {
		say("Waiting for NATS at %s", url)
	}
	sub, err := subscribeNarration(nc, say)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	<-ctx.Done()
	return nil
}
