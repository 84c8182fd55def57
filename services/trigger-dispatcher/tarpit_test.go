package main

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// tarpit is a webhook receiver that accepts connections and never answers.
type tarpit struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newTarpit(t testing.TB) *tarpit {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tp := &tarpit{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tp.mu.Lock()
			tp.conns = append(tp.conns, c)
			tp.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		tp.mu.Lock()
		defer tp.mu.Unlock()
		for _, c := range tp.conns {
			_ = c.Close()
		}
	})
	return tp
}

func (tp *tarpit) URL() string { return "http://" + tp.ln.Addr().String() + "/hook" }

func (tp *tarpit) accepted() int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return len(tp.conns)
}

// One slow receiver does not hold everyone up: while 64 beforeInstall deliveries (as many as the
// consumer runs at once) go to receivers that accept and never answer, and keep retrying, a
// healthy receiver's delivery is made within seconds. Each tarpit delivery holds a consumer
// slot only during an attempt (3 s here), never through its backoff (1-2 s, then 2-4 s, ...);
// holding it through the backoff, the healthy delivery waited for all five attempts of a tarpit
// delivery (at least 30 s).
func TestTarpitReceiversDoNotHoldUpOthers(t *testing.T) {
	h := newHarness(t)
	tp := newTarpit(t)
	startService(t, h.env("TRIGGER_DEFAULT_TIMEOUT", "3s", "TRIGGER_MAX_ATTEMPTS", "5",
		"TRIGGER_BACKOFF_BASE", "2s", "TRIGGER_BACKOFF_MAX", "30s"))

	const tarpits = 64
	for i := range tarpits {
		h.gated(h.intent(fmt.Sprintf("tarpit-%02d", i), "h1", &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: tp.URL()}}))
	}
	// Every slot is taken by a tarpit attempt.
	deadline := time.Now().Add(30 * time.Second)
	for tp.accepted() < tarpits {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d tarpit deliveries started within 30s", tp.accepted(), tarpits)
		}
		time.Sleep(20 * time.Millisecond)
	}

	healthy := newReceiver(t)
	start := time.Now()
	in := h.intent("healthy", "h1", &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: healthy.URL()}})
	h.gated(in)
	const bound = 12 * time.Second // one tarpit attempt (3 s), with room for a loaded machine
	limit := time.After(60 * time.Second)
	for {
		var e events.Event
		select {
		case e = <-h.outcomes:
		case <-limit:
			t.Fatalf("healthy delivery not made within 60s, while %d tarpit deliveries retry", tarpits)
		}
		if !matches(e, events.PhaseBeforeInstall, in.ID()) {
			continue
		}
		took := time.Since(start)
		t.Logf("healthy delivery made %s after its intent, while %d tarpit deliveries retry", took.Round(time.Millisecond), tarpits)
		if d, ok := e.(*events.TriggerDelivered); !ok || d.Attempts != 1 {
			t.Fatalf("healthy outcome = %+v, want TriggerDelivered after 1 attempt", e)
		}
		if took > bound {
			t.Fatalf("healthy delivery took %s, want under %s: tarpit deliveries held the consumer's slots", took, bound)
		}
		return
	}
}
