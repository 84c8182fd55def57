package events

// Routing: which consumer receives which event types. It is declared once, in the catalog
// (descriptor.Consumers), and everything else derives from it: the durable consumers' filter
// subjects (DefaultTopology, ClaimWriterConsumer), the AsyncAPI receive operations, and the
// check that a consumer's handler table handles exactly the types routed to it (Router.Check).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrNoHandler marks an event delivered to a Router that has no handler for its type. Check
// makes this impossible for the types the catalog routes to the consumer, so it means the
// consumer's filter on the server selects more than the catalog routes (a topology applied by
// another version, say). Consume acknowledges such an event and logs it ("Ignored event"): it
// is not this consumer's to act on, and it stays in the stream for audit.
var ErrNoHandler = errors.New("no handler for the event type")

// Consumers lists every consumer the catalog routes event types to, in the order of their first
// routed type.
func Consumers() []string {
	var out []string
	for _, d := range catalog {
		for _, c := range d.Consumers {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	return out
}

// RoutedTo lists the event types the catalog routes to consumer, in catalog order.
func RoutedTo(consumer string) []string {
	var out []string
	for _, d := range catalog {
		if slices.Contains(d.Consumers, consumer) {
			out = append(out, d.Type)
		}
	}
	return out
}

// filterSubjects derives a consumer's filter subjects from the subjects of the types routed to
// it: one filter per type. bind fixes subject parameters to a value (the claim writer's
// {cluster}); an unbound parameter becomes '*', or '>' when every parameter after it is unbound.
func filterSubjects(consumer string, bind map[string]string) []string {
	var out []string
	for _, t := range RoutedTo(consumer) {
		out = append(out, filterOf(mustDescribe(t).Subject, bind))
	}
	return out
}

func filterOf(pattern []string, bind map[string]string) string {
	bound := func(t string) (string, bool) {
		v, ok := bind[strings.Trim(t, "{}")]
		return v, ok && isParam(t)
	}
	tokens := make([]string, 0, len(pattern))
	for i, t := range pattern {
		if !isParam(t) {
			tokens = append(tokens, t)
			continue
		}
		if v, ok := bound(t); ok {
			tokens = append(tokens, EscapeToken(v))
			continue
		}
		rest := slices.IndexFunc(pattern[i:], func(t string) bool {
			_, ok := bound(t)
			return !isParam(t) || ok
		})
		if rest < 0 {
			tokens = append(tokens, ">")
			break
		}
		tokens = append(tokens, "*")
	}
	return strings.Join(tokens, ".")
}

// Route is one entry of a handler table: an event type and its handler. Build it with On.
type Route struct {
	eventType string
	handle    Handler
	err       error
}

// On makes the route of event type E (a pointer to an event struct of this package, such as
// *InstallIntent) to h, which receives the event already typed.
func On[E Event](h func(ctx context.Context, e E, m Meta) error) Route {
	var zero E
	if any(zero) == nil { // E is an interface type, not one event type
		return Route{err: fmt.Errorf("route for %T: want a pointer to an event type, such as *events.InstallIntent", zero)}
	}
	// The Type methods do not read their receiver, so the nil pointer names its type.
	t := zero.Type()
	return Route{eventType: t, handle: func(ctx context.Context, e Event, m Meta) error {
		typed, ok := e.(E)
		if !ok {
			return fmt.Errorf("%w: event %s is a %T, the handler of %s wants a %T", ErrInvalidEvent, e.ID(), e, t, zero)
		}
		return h(ctx, typed, m)
	}}
}

// Router is the handler table of one consumer: one typed handler per event type the catalog
// routes to it, instead of a type switch. Its Handle method is the consumer's Handler; Check
// (run by Consume at start when ConsumerOptions.Routes is set, as Router.Consume does, and by
// each service's tests) reports a routed type without a
// handler and a handler of a type the consumer never receives.
type Router struct {
	consumer string
	handlers map[string]Handler
	errs     []error
}

// NewRouter returns the handler table of consumer (ConsumerRuleEngine, ...) with routes.
func NewRouter(consumer string, routes ...Route) *Router {
	r := &Router{consumer: consumer, handlers: make(map[string]Handler, len(routes))}
	for _, rt := range routes {
		switch {
		case rt.err != nil:
			r.errs = append(r.errs, fmt.Errorf("consumer %s: %w", consumer, rt.err))
		case r.handlers[rt.eventType] != nil:
			r.errs = append(r.errs, fmt.Errorf("consumer %s has two handlers for %s", consumer, rt.eventType))
		default:
			r.handlers[rt.eventType] = rt.handle
		}
	}
	return r
}

// Consumer is the name of the consumer the table is for.
func (r *Router) Consumer() string { return r.consumer }

// Check compares the table with the catalog's routing. It returns nil when the table handles
// exactly the types routed to its consumer, and otherwise an error naming every type without a
// handler, every handler of a type the consumer never receives, and every type with two handlers.
func (r *Router) Check() error {
	want := RoutedTo(r.consumer)
	if len(want) == 0 {
		return fmt.Errorf("consumer %q: the catalog routes no event type to it", r.consumer)
	}
	errs := slices.Clone(r.errs)
	for _, d := range catalog {
		routed, handled := slices.Contains(want, d.Type), r.handlers[d.Type] != nil
		switch {
		case routed && !handled:
			errs = append(errs, fmt.Errorf("consumer %s receives %s but has no handler for it", r.consumer, d.Type))
		case handled && !routed:
			errs = append(errs, fmt.Errorf("consumer %s has a handler for %s, which the catalog does not route to it", r.consumer, d.Type))
		}
	}
	return errors.Join(errs...)
}

// Handle is the Handler of the table: it calls the handler of the event's type. An event of a
// type without a handler gets an error wrapping ErrNoHandler, which Consume acknowledges and logs.
func (r *Router) Handle(ctx context.Context, e Event, m Meta) error {
	h := r.handlers[e.Type()]
	if h == nil {
		return fmt.Errorf("consumer %s: %s: %w", r.consumer, e.Type(), ErrNoHandler)
	}
	return h(ctx, e, m)
}

// Consume consumes with the table: Consume with r.Handle and opts.Routes set to r, so the table
// is checked before binding. opts.Name, the durable consumer to bind, defaults to the table's
// consumer.
func (r *Router) Consume(ctx context.Context, js jetstream.JetStream, opts ConsumerOptions) (*Consumer, error) {
	if opts.Name == "" {
		opts.Name = r.consumer
	}
	opts.Routes = r
	return Consume(ctx, js, r.Handle, opts)
}
