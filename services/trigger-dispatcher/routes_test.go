package main

import "testing"

// The handler table handles exactly the event types the catalog routes to trigger-dispatcher: a
// route added in pkg/events without a handler here fails this test (and the service's start).
func TestRoutesCoverTheConsumer(t *testing.T) {
	if err := dispatcherRoutes(&dispatcher{}).Check(); err != nil {
		t.Fatal(err)
	}
}
