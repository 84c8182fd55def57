package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Handler handles one event. It returns nil when the event is done (the message is acknowledged),
// an error wrapping ErrPermanent or ErrInvalidEvent when retrying cannot help (the message becomes
// a dead letter with the error as its reason), an error wrapping ErrNoHandler when the event is
// not its to handle (acknowledged and logged, see Router), and any other error to have it retried
// with backoff. A panic counts as a permanent error: the event becomes a dead letter with the panic
// value as its reason (see Consumer.call).
// Handlers must be idempotent: a message may be delivered more than once.
type Handler func(ctx context.Context, e Event, m Meta) error

// ErrPermanent marks an error that retrying cannot fix, such as an invalid spec.
var ErrPermanent = errors.New("permanent error")

// Permanent wraps err so the consumer dead-letters the message instead of retrying it.
func Permanent(err error) error { return fmt.Errorf("%w: %w", ErrPermanent, err) }

// handBackDelay is how long a message handed back at shutdown waits before redelivery.
const handBackDelay = 200 * time.Millisecond

// Headers the consumer adds to a dead letter, next to the original event's headers.
const (
	HeaderDeadReason   = "Enforcement-Dead-Letter-Reason"
	HeaderDeadConsumer = "Enforcement-Dead-Letter-Consumer"
	HeaderDeadSubject  = "Enforcement-Original-Subject"
	HeaderDeadSequence = "Enforcement-Original-Sequence"
	HeaderDeadAttempts = "Enforcement-Attempts"
)

// ConsumerOptions configure Consume. Only Name is required.
type ConsumerOptions struct {
	// Name is the durable consumer to bind (declared in the Topology).
	Name string
	// Stream is the stream the consumer belongs to; StreamName by default.
	Stream string
	// MaxAttempts bounds how often one message is handled (counting redeliveries) before it is
	// dead-lettered; 8 by default.
	MaxAttempts int
	// Backoff gives the wait before retry number attempt (1-based); by default 1 s doubling up to 30 s.
	Backoff func(attempt int) time.Duration
	// HandlerTimeout bounds one handler call; 2 minutes by default.
	HandlerTimeout time.Duration
	// Concurrency bounds how many handlers run at once (across keys), and how many busy keys
	// have a worker; 16 by default. Waiting for a retry, or in Idle, does not count.
	Concurrency int
	// Logger receives retries and dead letters; slog.Default() by default.
	Logger *slog.Logger
	// Metrics, if set, counts outcomes and handling time.
	Metrics *Metrics
	// Routes, if set, is the consumer's handler table (the handler passed to Consume calls its
	// Handle); Consume runs its Check before binding and fails, naming the types, if the table
	// does not handle exactly the types routed to the consumer.
	Routes *Router
}

func (o *ConsumerOptions) defaults() {
	if o.Stream == "" {
		o.Stream = StreamName
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 8
	}
	if o.Backoff == nil {
		o.Backoff = ExponentialBackoff(time.Second, 30*time.Second)
	}
	if o.HandlerTimeout == 0 {
		o.HandlerTimeout = 2 * time.Minute
	}
	if o.Concurrency == 0 {
		o.Concurrency = 16
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// ExponentialBackoff returns a backoff that starts at base and doubles up to limit.
func ExponentialBackoff(base, limit time.Duration) func(int) time.Duration {
	return func(attempt int) time.Duration {
		d := base
		for i := 1; i < attempt && d < limit; i++ {
			d *= 2
		}
		return min(d, limit)
	}
}

// Consumer runs a Handler over a durable pull consumer.
//
// Ordering: messages are queued per ordering key (the ce-subject header, see Event.OrderingKey)
// and each key has at most one message in flight. A failed message is retried in place, after
// its backoff, while the message is kept alive with InProgress; later messages of the same key
// wait behind it, messages of other keys go on. A plain Nak would let the next message of the key
// overtake the failed one, which is why retries do not go back to the server.
//
// Concurrency: at most ConsumerOptions.Concurrency handlers run at once. A message waiting for
// its retry holds no slot, nor does a handler while it waits through Idle, so slow or failing
// keys cannot starve the others for longer than one handler call. A key gets a worker (a
// goroutine) only while fewer than Concurrency workers are busy, that is neither waiting for a
// retry nor in Idle; the other busy keys wait in the order they became busy (ready), their
// messages kept alive by the consumer, so that a burst of keys (up to the consumer's
// MaxAckPending) does not start a goroutine and a stack for each.
type Consumer struct {
	opts       ConsumerOptions
	js         jetstream.JetStream
	cons       jetstream.Consumer
	pull       *puller
	ackWait    time.Duration
	maxDeliver int
	handler    Handler
	handlerCtx context.Context
	// abort cancels handlerCtx (Abort).
	abort context.CancelFunc

	mu     sync.Mutex
	queues map[string]*keyQueue // messages not finished yet, per ordering key
	spare  []*keyQueue          // emptied queues, for the next keys that become busy
	parked []*worker            // workers waiting for a key, the last parked last
	// busy counts the workers that run a key and are not waiting (for a retry, or in Idle).
	busy int
	// ready holds, from readyHead on, the busy keys waiting for a worker, in the order they
	// became busy; readyKeep keeps their messages alive meanwhile.
	ready     []*keyQueue
	readyHead int
	readyKeep readyKeeper
	stopping  bool
	stopCh    chan struct{}
	sem       chan struct{}
	wg        sync.WaitGroup
}

// Consume binds the durable consumer opts.Name and starts handling its messages. The consumer
// must exist (Topology.Apply creates it). ctx is the parent of handler contexts, which survive
// its cancellation: handlers in flight at shutdown finish within HandlerTimeout. Call Stop to
// shut down.
func Consume(ctx context.Context, js jetstream.JetStream, h Handler, opts ConsumerOptions) (*Consumer, error) {
	opts.defaults()
	if opts.Routes != nil {
		if err := opts.Routes.Check(); err != nil {
			return nil, fmt.Errorf("consumer %s: handler table: %w", opts.Name, err)
		}
	}
	cons, err := js.Consumer(ctx, opts.Stream, opts.Name)
	if err != nil {
		return nil, fmt.Errorf("bind consumer %s: %w", opts.Name, err)
	}
	info := cons.CachedInfo()
	handlerCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	c := &Consumer{
		opts:       opts,
		js:         js,
		ackWait:    info.Config.AckWait,
		maxDeliver: info.Config.MaxDeliver,
		handler:    h,
		handlerCtx: handlerCtx,
		abort:      abort,
		queues:     make(map[string]*keyQueue),
		stopCh:     make(chan struct{}),
		sem:        make(chan struct{}, opts.Concurrency),
	}
	c.cons = cons
	// An instance that stopped just before handed its unfinished messages back with
	// handBackDelay (handBack). Pulled at once, a later message of one of their keys that it never
	// received would come first, as new; after the delay the server redelivers them ahead of new
	// messages.
	if info.NumAckPending > 0 {
		select {
		case <-time.After(handBackDelay + handBackDelay/2):
		case <-ctx.Done():
			abort()
			return nil, fmt.Errorf("consume %s: %w", opts.Name, ctx.Err())
		}
	}
	if c.pull, err = startPull(js, opts.Stream, opts.Name, c.enqueue, opts.Logger); err != nil {
		return nil, fmt.Errorf("consume %s: %w", opts.Name, err)
	}
	return c, nil
}

// enqueue puts a message behind the others of its key and starts a worker for an idle key.
// While stopping, messages are only queued; Stop hands them back once pulling has ended.
func (c *Consumer) enqueue(msg *delivery) {
	key := headerValue(msg.Headers(), HeaderSubject)
	if key == "" {
		key = "subject:" + msg.Subject()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.queues[key]
	if q == nil {
		if n := len(c.spare); n > 0 {
			q = c.spare[n-1]
			c.spare[n-1] = nil
			c.spare = c.spare[:n-1]
		} else {
			q = new(keyQueue)
		}
		q.key = key
		c.queues[key] = q
	}
	q.msgs = append(q.msgs, msg)
	if !q.running && !c.stopping && c.handlerCtx.Err() == nil {
		q.running = true // a worker runs the key, or it is ready for one
		if c.busy < c.opts.Concurrency {
			c.startLocked(q)
		} else {
			c.ready = append(c.ready, q)
			c.readyKeep.arm(c)
		}
	}
}

// startLocked gives the busy key q a worker: the one parked last, or a new one. c.mu is held.
func (c *Consumer) startLocked(q *keyQueue) {
	c.busy++
	c.wg.Add(1)
	if n := len(c.parked); n > 0 {
		w := c.parked[n-1]
		c.parked[n-1] = nil
		c.parked = c.parked[:n-1]
		w.keys <- q // never blocks: a parked worker's channel is empty
		return
	}
	w := &worker{c: c, keys: make(chan *keyQueue, 1), keep: keeper{period: c.ackWait / 6, queueMu: &c.mu}}
	go w.run(q)
}

// nextReadyLocked takes the key that has been ready longest, nil when none is or the consumer
// stops. c.mu is held.
func (c *Consumer) nextReadyLocked() *keyQueue {
	if c.readyHead == len(c.ready) || c.stopping || c.handlerCtx.Err() != nil {
		return nil
	}
	q := c.ready[c.readyHead]
	c.ready[c.readyHead] = nil
	c.readyHead++
	if c.readyHead == len(c.ready) {
		c.ready, c.readyHead = c.ready[:0], 0
	}
	return q
}

// waitBegins and waitEnds bracket a worker's wait for a retry or in Idle: while it waits, the
// key ready longest gets a worker.
func (c *Consumer) waitBegins() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.busy--
	if q := c.nextReadyLocked(); q != nil {
		c.startLocked(q)
	}
}

func (c *Consumer) waitEnds() {
	c.mu.Lock()
	c.busy++
	c.mu.Unlock()
}

// readyKeeper keeps the messages of the ready keys alive (InProgress) every third of AckWait
// while there are any: no worker does it for them yet. c.mu guards it.
type readyKeeper struct {
	timer *time.Timer
	armed bool
}

// arm starts the reports, if they are not running. c.mu is held.
func (k *readyKeeper) arm(c *Consumer) {
	if k.armed || c.ackWait <= 0 {
		return
	}
	k.armed = true
	if k.timer == nil {
		k.timer = time.AfterFunc(c.ackWait/3, c.keepReadyAlive)
	} else {
		k.timer.Reset(c.ackWait / 3)
	}
}

func (c *Consumer) keepReadyAlive() {
	c.mu.Lock()
	var msgs []*delivery
	for _, q := range c.ready[c.readyHead:] {
		msgs = append(msgs, q.msgs[q.head:]...)
	}
	if len(msgs) == 0 || c.stopping {
		c.readyKeep.armed = false
		c.mu.Unlock()
		return
	}
	c.readyKeep.timer.Reset(c.ackWait / 3)
	c.mu.Unlock()
	for _, m := range msgs {
		_ = m.InProgress()
	}
}

// maxSpareArray bounds the array of a queue kept for another key: a key that had a long backlog
// does not leave its array behind for good.
const maxSpareArray = 64

// keyQueue holds the messages of one ordering key that are not finished yet, in order. c.mu
// guards it. An emptied queue is kept (Consumer.spare) for the next key that becomes busy, with
// its array: in BenchmarkConsume, nearly every message made a key busy, and a queue of its own.
type keyQueue struct {
	key     string
	msgs    []*delivery // msgs[head] is the first message, in work or next
	head    int
	running bool // a worker runs the key
}

func (q *keyQueue) len() int { return len(q.msgs) - q.head }

// pop drops the first message; once the queue is empty, it starts again at the front of its array.
func (q *keyQueue) pop() {
	q.msgs[q.head] = nil
	q.head++
	if q.head == len(q.msgs) {
		q.msgs, q.head = q.msgs[:0], 0
	}
}

// maxParked bounds the workers kept waiting for a key, per Consumer.
const maxParked = 256

// worker is a goroutine that runs the key it was started for, then waits for another key rather
// than ending. A new goroutine for every key that became busy (in BenchmarkConsume, for nearly
// every message) had its stack grown again while decoding: 9 % of the client's CPU. At most
// maxParked workers wait; they end when the consumer stops.
//
// The worker parked last is the first to get a key (a stack, where a channel shared by all
// would hand the key to the one that waited longest): a few workers then do most of the work,
// and fewer stacks the garbage collector shrank in between have to grow again.
type worker struct {
	c    *Consumer
	keys chan *keyQueue // the next key, while parked; a buffer of one
	keep keeper         // the keep-alive of the message in work, reused from one to the next
	// queue is the key in work (this worker's goroutine alone reads and writes it).
	queue *keyQueue
}

func (w *worker) run(q *keyQueue) {
	c := w.c
	for {
		next, park := c.runKey(w, q)
		if next != nil {
			q = next
			continue
		}
		if !park {
			return
		}
		select {
		case q = <-w.keys:
		case <-c.stopCh:
			// A key handed over before the stop still has the worker counted in c.wg: run
			// it (runKey returns at once, the key's messages stay queued for Stop).
			select {
			case q = <-w.keys:
				c.runKey(w, q)
			default:
			}
			return
		}
	}
}

// runKey handles the messages of one key, one at a time, until its queue is empty or the
// consumer stops; at a stop, unfinished messages stay queued, in order, for Stop to hand back.
// It returns the key ready longest, for the worker to run next, or else reports whether the
// worker was parked, to wait for another key.
func (c *Consumer) runKey(w *worker, q *keyQueue) (next *keyQueue, park bool) {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		if q.len() == 0 || c.stopping || c.handlerCtx.Err() != nil {
			q.running = false
			if q.len() == 0 {
				delete(c.queues, q.key)
				if len(c.spare) < maxParked && cap(q.msgs) <= maxSpareArray {
					c.spare = append(c.spare, q)
				}
			}
			if next = c.nextReadyLocked(); next != nil {
				c.wg.Add(1) // busy stays as it is: this worker runs next
				c.mu.Unlock()
				return next, false
			}
			c.busy--
			park = !c.stopping && len(c.parked) < maxParked
			if park {
				c.parked = append(c.parked, w)
			}
			c.mu.Unlock()
			return nil, park
		}
		msg := q.msgs[q.head]
		c.mu.Unlock()

		w.queue = q
		if c.process(w, msg) {
			c.mu.Lock()
			q.pop()
			c.mu.Unlock()
		}
	}
}

// process decides, in this one place, what happens to a message: ack, retry in place or dead
// letter. It returns false when a stop interrupted a retry wait, or an Abort the handler: the
// message is then left for Stop to hand back.
func (c *Consumer) process(w *worker, msg *delivery) bool {
	ev, meta, err := Decode(msg.Subject(), msg.Headers(), msg.Data())
	if seq, delivered, ok := msg.Sequences(); ok {
		meta.Sequence, meta.NumDelivered = seq, delivered
	}
	if err != nil {
		c.deadLetter(msg, meta, 1, err)
		return true
	}
	w.keep.start(msg, w.queue)
	defer w.keep.stop()

	for local := 1; ; local++ {
		start := time.Now()
		// A slot is held only while the handler runs: a message waiting for its retry (below)
		// holds none, and a handler gives its slot back while it waits itself (Idle).
		ctx := &handlerContext{parent: c.handlerCtx, slot: slot{sem: c.sem, consumer: c}}
		ctx.slot.take()
		ctx.deadline = time.Now().Add(c.opts.HandlerTimeout) // the timeout starts with the slot
		err = c.call(ctx, ev, meta)
		end := time.Now()
		ctx.end(end)
		ctx.slot.release()
		c.opts.Metrics.observe(meta.Type, end.Sub(start))
		if err == nil {
			c.ack(msg, meta, "acked")
			return true
		}
		if c.handlerCtx.Err() != nil {
			// Aborted (Abort): the work is not this instance's any more. Whatever the handler
			// returned, the message is left unfinished for Stop to hand back.
			return false
		}
		if errors.Is(err, ErrNoHandler) {
			// Not this consumer's to act on (see ErrNoHandler): acknowledged, kept in the stream.
			c.opts.Logger.Warn("Ignored event", "consumer", c.opts.Name, "type", meta.Type, "id", meta.ID, "reason", err.Error())
			c.ack(msg, meta, "ignored")
			return true
		}
		attempt := int(meta.NumDelivered) - 1 + local
		if errors.Is(err, ErrPermanent) || errors.Is(err, ErrInvalidEvent) {
			c.deadLetter(msg, meta, attempt, err)
			return true
		}
		if attempt >= c.opts.MaxAttempts || (c.maxDeliver > 0 && int(meta.NumDelivered) >= c.maxDeliver) {
			c.deadLetter(msg, meta, attempt, fmt.Errorf("gave up after %d attempts: %w", attempt, err))
			return true
		}
		wait := c.opts.Backoff(attempt)
		c.opts.Metrics.outcome(meta.Type, "retried")
		c.opts.Logger.Warn("Retrying event", "consumer", c.opts.Name, "type", meta.Type, "id", meta.ID,
			"attempt", attempt, "wait", wait.String(), "error", err)
		c.waitBegins()
		select {
		case <-time.After(wait):
		case <-c.stopCh:
			c.waitEnds()
			return false
		}
		c.waitEnds()
	}
}

// call runs the handler and turns a panic into a permanent error, so the event becomes a dead
// letter with the panic value as its reason and the service goes on with other events (and with
// later events of the same key). A handler that panics on an event panics again on every
// redelivery, so retrying cannot help; and an unrecovered panic would end the process and, after
// MaxDeliver restarts, lose the event. The stack goes to the log only. A panic in a goroutine the
// handler started itself is not recovered here.
func (c *Consumer) call(ctx context.Context, ev Event, meta Meta) (err error) {
	defer func() {
		if p := recover(); p != nil {
			c.opts.Metrics.outcome(meta.Type, "panicked")
			c.opts.Logger.Error("Recovered panic in handler", "consumer", c.opts.Name, "type", meta.Type, "id", meta.ID,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = Permanent(fmt.Errorf("handler panic: %v", p))
		}
	}()
	return c.handler(ctx, ev, meta)
}

// ack acknowledges a finished message and counts it under outcome. A failed ack only means the
// message comes again, which handlers must tolerate anyway.
func (c *Consumer) ack(msg *delivery, meta Meta, outcome string) {
	if err := msg.Ack(); err != nil {
		c.opts.Logger.Warn("Ack failed; the event will be redelivered", "consumer", c.opts.Name, "id", meta.ID, "error", err)
	}
	c.opts.Metrics.outcome(meta.Type, outcome)
}

// keeper tells the server that the message in work is still being worked on, so AckWait never
// triggers a redelivery (and an overtaking) while a handler runs or a retry waits. It has one
// timer per worker, which ticks every sixth of AckWait while the worker is busy, and sends
// InProgress at every second tick a message sees: the first at most a third of AckWait after the
// message started, and then every third. It costs a timer, not a goroutine, and only while the
// worker is busy: most messages are done long before their first InProgress is due, and a timer
// made, or even reset and stopped, for every message was a good part of the consumer's own CPU
// per message (BenchmarkConsume). The timer stops at the first tick that finds no message.
//
// The messages queued behind the one in work (same key) are reported in progress with it: their
// AckWait runs too, and one redelivered while it waits would be handled twice.
type keeper struct {
	period  time.Duration // a sixth of AckWait; 0 when AckWait is unknown: nothing to keep alive
	queueMu *sync.Mutex   // guards queue's messages (the consumer's mutex)

	mu     sync.Mutex
	queue  *keyQueue // the queue of msg's key
	timer  *time.Timer
	armed  bool        // timer will tick
	msg    *delivery   // the message in work, nil between two messages
	ticks  int         // ticks msg saw since it started or was last reported in progress
	behind []*delivery // reused: the messages queued behind msg at a report
}

// start keeps msg, first in queue, alive until stop (and the messages queued behind it).
func (k *keeper) start(msg *delivery, queue *keyQueue) {
	if k.period <= 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.msg, k.queue, k.ticks = msg, queue, 0
	switch {
	case k.timer == nil:
		k.timer = time.AfterFunc(k.period, k.tick)
	case !k.armed:
		k.timer.Reset(k.period)
	}
	k.armed = true
}

func (k *keeper) stop() {
	if k.period <= 0 {
		return
	}
	k.mu.Lock()
	k.msg, k.queue = nil, nil
	k.mu.Unlock()
}

func (k *keeper) tick() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.msg == nil {
		k.armed = false
		return
	}
	if k.ticks++; k.ticks == 2 {
		_ = k.msg.InProgress()
		k.ticks = 0
		for _, m := range k.queued() {
			_ = m.InProgress()
		}
		clear(k.behind) // keep no message past its turn
	}
	k.timer.Reset(k.period)
}

// queued returns the messages waiting behind msg in its key's queue.
func (k *keeper) queued() []*delivery {
	k.behind = k.behind[:0]
	if k.queue == nil {
		return nil
	}
	k.queueMu.Lock()
	if q := k.queue; q.len() > 1 && q.msgs[q.head] == k.msg {
		k.behind = append(k.behind, q.msgs[q.head+1:]...)
	}
	k.queueMu.Unlock()
	return k.behind
}

// handBack returns a message to the server at shutdown so that another instance gets it at once.
// It is called only after pulling ended: a message handed back earlier could be redelivered to
// this very subscription while it drains, and come back behind its successors.
//
// The short delay keeps each key's order: the handed-back messages expire together and the
// server queues them for redelivery sorted by stream sequence. Before they expire, forgetPulls
// has had the server drop this subscription's pull requests, where a delivery attempt would put
// a message back behind its successors.
func (c *Consumer) handBack(msg *delivery) {
	_ = msg.NakWithDelay(handBackDelay)
	c.opts.Metrics.outcome(headerValue(msg.Headers(), HeaderType), "handed_back")
}

// forgetPulls has the server drop this instance's pull requests before Stop hands messages back.
// Their subscription is gone, but the server notices that only when it next looks at a request:
// when it answers a consumer info request, or when it tries to deliver there. Such a delivery
// takes the first handed-back message off the redelivery queue, finds no one listening, and puts
// the message back at the end of the queue, behind the later messages of its key (nats-server
// v2.15, loopAndGatherMsgs): without another instance pulling, the next one to start would get a
// key's first message last (TestContractHandedBackMessagesKeepTheirOrderForALateSuccessor). An
// info request first has the server drop the dead requests. If it fails, the messages are handed
// back all the same.
func (c *Consumer) forgetPulls(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, forgetPullsTimeout)
	defer cancel()
	if _, err := c.cons.Info(ctx); err != nil {
		c.opts.Logger.Warn("Consumer info before the hand-back failed; the next instance may get a key's first message last",
			"consumer", c.opts.Name, "error", err)
	}
}

// forgetPullsTimeout bounds forgetPulls' request: a server that does not answer in time does not
// hold up the stop.
const forgetPullsTimeout = 2 * time.Second

// deadLetter stores the message with the reason on the consumer's dead-letter subject and then
// terminates it. If the dead letter cannot be stored the message is retried later instead: it is
// never dropped.
func (c *Consumer) deadLetter(msg *delivery, meta Meta, attempts int, reason error) {
	dl := nats.NewMsg(DeadLetterSubject(c.opts.Name))
	dl.Data = msg.Data()
	for k, v := range msg.Headers() {
		dl.Header[k] = append([]string(nil), v...)
	}
	dl.Header.Set(HeaderDeadReason, reason.Error())
	dl.Header.Set(HeaderDeadConsumer, c.opts.Name)
	dl.Header.Set(HeaderDeadSubject, msg.Subject())
	dl.Header.Set(HeaderDeadSequence, strconv.FormatUint(meta.Sequence, 10))
	dl.Header.Set(HeaderDeadAttempts, strconv.Itoa(attempts))
	dl.Header.Set(nats.MsgIdHdr, "dead-letter:"+c.opts.Name+":"+strconv.FormatUint(meta.Sequence, 10))
	ctx, cancel := context.WithTimeout(c.handlerCtx, 10*time.Second)
	defer cancel()
	if _, err := c.js.PublishMsg(ctx, dl); err != nil {
		c.opts.Logger.Error("Dead letter not stored; the event will be redelivered", "consumer", c.opts.Name, "id", meta.ID, "error", err)
		_ = msg.NakWithDelay(c.opts.Backoff(attempts))
		return
	}
	_ = msg.TermWithReason(truncate(reason.Error(), 256))
	c.opts.Metrics.outcome(meta.Type, "dead_lettered")
	c.opts.Logger.Error("Dead-lettered event", "consumer", c.opts.Name, "type", meta.Type, "id", meta.ID,
		"sequence", meta.Sequence, "reason", reason.Error())
}

// Stop stops pulling, lets in-flight handlers finish, and hands every message that was not
// finished back to the server, key by key in order, so the next instance continues where this
// one stopped. It returns early with an error if ctx ends first; unfinished messages are then
// redelivered after AckWait.
//
// One race is left. A message the server is sending at the moment the pull ends never reaches
// this instance, and the server queues it for redelivery at once (nats-server v2.15,
// didNotDeliver), ahead of the messages handed back, which wait out handBackDelay: the next
// instance may get it before earlier messages of its key. It happened about once in 25 stops in
// a stress run of the contract tests on a loaded machine. The services guard against a late
// event as against a replay: rule-engine keeps a cluster's newest record by its decision
// sequence, argo-syncer acts on no intent older than its pair's newest decision.
func (c *Consumer) Stop(ctx context.Context) error {
	defer c.abort() // the handlers have returned (or the stop gave up on them): release the context
	c.mu.Lock()
	if c.stopping {
		c.mu.Unlock()
		return nil
	}
	c.stopping = true
	close(c.stopCh)
	c.mu.Unlock()

	if err := c.pull.drain(); err != nil {
		c.opts.Logger.Warn("Consumer pull not drained", "consumer", c.opts.Name, "error", err)
	} else {
		select {
		case <-c.pull.closed:
		case <-ctx.Done():
			return fmt.Errorf("stop consumer %s: %w", c.opts.Name, ctx.Err())
		}
	}
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("stop consumer %s: %w", c.opts.Name, ctx.Err())
	}
	c.forgetPulls(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, q := range c.queues {
		for _, m := range q.msgs[q.head:] {
			c.handBack(m)
		}
		delete(c.queues, key)
	}
	c.ready, c.readyHead = nil, 0
	if c.readyKeep.timer != nil {
		c.readyKeep.timer.Stop()
	}
	return nil
}

// Abort cancels the context of every handler in flight, and no handler starts any more: for an
// instance that must stop working at once rather than finish what it holds (it lost its
// leadership, and another instance may already be handling the same keys). The handlers'
// messages, and every message not handled yet, are left unfinished; Stop, still to be called,
// hands them back for redelivery.
func (c *Consumer) Abort() { c.abort() }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
