package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// GetJSON reads the JSON value stored under key in kv and returns it with its revision, for the
// compare-and-swap updates a service makes next. A key that does not exist is no error: it
// returns nil and revision 0. what names the value in errors ("read install gate <key>: ...").
func GetJSON[T any](ctx context.Context, kv jetstream.KeyValue, key, what string) (*T, uint64, error) {
	entry, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read %s %s: %w", what, key, err)
	}
	var v T
	if err := json.Unmarshal(entry.Value(), &v); err != nil {
		return nil, 0, fmt.Errorf("decode %s %s: %w", what, key, err)
	}
	return &v, entry.Revision(), nil
}
