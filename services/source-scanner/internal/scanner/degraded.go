package scanner

import (
	"context"
	"errors"
	"fmt"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// DegradedError is how a Lister says why its listing cannot be trusted. Reason is one of the
// events.Degraded* constants; it travels in the SourceDegraded event and, through rule-engine,
// into the affected rules' conditions. Err is the cause; its text must not contain credentials.
type DegradedError struct {
	Reason string
	Err    error
}

// Degraded wraps err with a degraded reason.
func Degraded(reason string, err error) error {
	return &DegradedError{Reason: reason, Err: err}
}

// Degradedf formats a degraded error.
func Degradedf(reason, format string, args ...any) error {
	return &DegradedError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

func (e *DegradedError) Error() string { return e.Reason + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *DegradedError) Unwrap() error { return e.Err }

// ReasonOf maps any listing error to a degraded reason: the reason of a DegradedError, else
// ListFailed (a timeout or a network error is a failed listing too).
func ReasonOf(err error) string {
	var d *DegradedError
	if errors.As(err, &d) && d.Reason != "" {
		return d.Reason
	}
	return events.DegradedListFailed
}

// messageOf is the human part of a listing error: the cause of a DegradedError (its reason
// travels separately), else the error itself.
func messageOf(err error) string {
	var d *DegradedError
	if errors.As(err, &d) && d.Err != nil {
		return d.Err.Error()
	}
	return err.Error()
}

// isTimeout reports whether err comes from the listing deadline rather than the source.
func isTimeout(err error) bool { return errors.Is(err, context.DeadlineExceeded) }
