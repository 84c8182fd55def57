package main

import "testing"

// The claim writer's handler table handles exactly the event types the catalog routes to the
// claim writer: a route added in pkg/events without a handler here fails this test (and the
// service's start).
func TestRoutesCoverTheConsumer(t *testing.T) {
	if err := (&claimWriter{}).routes().Check(); err != nil {
		t.Fatal(err)
	}
}
