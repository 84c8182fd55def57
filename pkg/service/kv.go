package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

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

// EachEntry calls fn for every current entry of kv whose key matches filter (a subject pattern
// such as "held.>"; ">" for all), with one watch (cheaper than a Get per key), and returns once
// the watch has delivered every stored value. Deleted keys are skipped. An error of fn stops the
// read and is returned as it is; ctx bounds the whole read. A watcher closed before it caught up
// is an error, so a partial read never passes for a complete one.
func EachEntry(ctx context.Context, kv jetstream.KeyValue, filter string, fn func(jetstream.KeyValueEntry) error) error {
	return EachEntryOf(ctx, kv, []string{filter}, fn)
}

// EachEntryOf is EachEntry over the keys matching any of filters (at least one), read with one
// watch: a lookup of many keys, or of one key token under every prefix ("clusters.*.<key>"),
// costs one round of the server rather than one per key.
func EachEntryOf(ctx context.Context, kv jetstream.KeyValue, filters []string, fn func(jetstream.KeyValueEntry) error) error {
	what := strings.Join(filters, ",")
	if len(filters) > 2 {
		what = fmt.Sprintf("%s and %d more keys", filters[0], len(filters)-1)
	}
	w, err := kv.WatchFiltered(ctx, filters, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("watch %s %s: %w", kv.Bucket(), what, err)
	}
	defer func() { _ = w.Stop() }() // a failed unsubscribe of a finished watch changes nothing
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("watch %s %s: %w", kv.Bucket(), what, ctx.Err())
		case entry, ok := <-w.Updates():
			switch {
			case !ok:
				return fmt.Errorf("watch %s %s: watcher closed before it caught up", kv.Bucket(), what)
			case entry == nil: // every stored value has been delivered
				return nil
			}
			if err := fn(entry); err != nil {
				return err
			}
		}
	}
}
