package events

import (
	"bytes"
	"os"
	"testing"
)

// TestAsyncAPIDocumentIsCurrent keeps asyncapi.yaml equal to what the Go types generate.
// Run with UPDATE_ASYNCAPI=1 (hack/generate.sh does) to rewrite it after changing an event.
func TestAsyncAPIDocumentIsCurrent(t *testing.T) {
	got, err := AsyncAPI()
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("UPDATE_ASYNCAPI") == "1" {
		if err := os.WriteFile("asyncapi.yaml", got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("asyncapi.yaml")
	if err != nil {
		t.Fatalf("%v (generate it with UPDATE_ASYNCAPI=1 go test -run TestAsyncAPIDocumentIsCurrent)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("asyncapi.yaml is out of date with the Go types: run hack/generate.sh")
	}
	for _, typ := range Types() {
		if !bytes.Contains(got, []byte("name: "+typ)) {
			t.Errorf("asyncapi.yaml does not describe %s", typ)
		}
	}
}
