package events

import (
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Pulling. The consumer keeps pull requests for up to pullBatch messages outstanding on the
// server, each waiting at most pullExpiry there, and asks for more as soon as half of them have
// arrived.
//
// It sends its pull requests itself rather than through nats.go's Consume (v1.55), which decides
// whether a request is due only when a message or a status arrives, and skips the decision while
// its previous request is still being sent by another goroutine. When the last messages owed
// arrive in that moment, nothing triggers the next request: the server holds none while messages
// wait, until the missing heartbeats reset the pull (twice the heartbeat, 5 s here). Here the
// request is sent from the goroutine that counts the messages, right after the message that
// brings the count down, so that cannot happen.
const (
	pullBatch     = 256
	pullExpiry    = 5 * time.Second
	pullHeartbeat = pullExpiry / 2
	// pullWatch is how often the puller checks that its requests are still alive: after a
	// reconnection, a status that ends them (a consumer leadership change), or missing
	// heartbeats, it asks again.
	pullWatch = 250 * time.Millisecond
)

// puller keeps pull requests outstanding on one durable consumer and hands each message, in the
// order they arrive, to deliver, which runs on the subscription's goroutine.
type puller struct {
	nc      *nats.Conn
	subject string // the consumer's next-message API subject
	inbox   string
	deliver func(*delivery)
	logger  *slog.Logger
	name    string

	sub    *nats.Subscription
	status chan nats.Status
	stopCh chan struct{}
	closed chan struct{} // closed once the subscription delivered its last message

	mu        sync.Mutex
	owed      int       // messages asked for and neither delivered nor given up by the server
	asked     time.Time // when the last request was sent
	heard     uint64    // messages and statuses received
	stopped   bool
	failing   bool   // the last status ended the requests; logged once until a message arrives
	lastError string // what that status said
}

// nextSubject is the JetStream API subject a pull request for stream's consumer goes to.
func nextSubject(js jetstream.JetStream, stream, consumer string) string {
	prefix := jetstream.DefaultAPIPrefix
	o := js.Options()
	if o.Domain != "" {
		prefix = "$JS." + o.Domain + ".API."
	} else if o.APIPrefix != "" {
		prefix = o.APIPrefix
		if !strings.HasSuffix(prefix, ".") {
			prefix += "."
		}
	}
	return prefix + "CONSUMER.MSG.NEXT." + stream + "." + consumer
}

// startPull subscribes an inbox, sends the first pull request and watches the requests.
func startPull(js jetstream.JetStream, stream, consumer string, deliver func(*delivery), logger *slog.Logger) (*puller, error) {
	nc := js.Conn()
	p := &puller{
		nc:      nc,
		subject: nextSubject(js, stream, consumer),
		inbox:   nc.NewInbox(),
		deliver: deliver,
		logger:  logger,
		name:    consumer,
		stopCh:  make(chan struct{}),
		closed:  make(chan struct{}),
	}
	sub, err := nc.Subscribe(p.inbox, p.receive)
	if err != nil {
		return nil, err
	}
	sub.SetClosedHandler(func(string) { close(p.closed) })
	p.sub = sub
	p.status = nc.StatusChanged(nats.CONNECTED)
	p.mu.Lock()
	p.topUp()
	p.mu.Unlock()
	go p.watch()
	return p, nil
}

// receive counts a message or a status from the server and, for a message, asks for more if due
// before handing it on.
func (p *puller) receive(m *nats.Msg) {
	if code := statusCode(m); code != "" {
		p.onStatus(m, code)
		return
	}
	p.mu.Lock()
	p.heard++
	p.owed = max(p.owed-1, 0)
	p.failing = false
	p.topUp()
	p.mu.Unlock()
	p.deliver(&delivery{msg: m, nc: p.nc})
}

// statusCode returns the status of a message the server sends about the pull (an empty message
// with a Status header), or "" for a stream message.
func statusCode(m *nats.Msg) string {
	if len(m.Data) > 0 || len(m.Header) == 0 {
		return ""
	}
	return m.Header.Get("Status")
}

// onStatus handles what the server says about the pull requests: idle heartbeats, requests that
// expired or ended with messages left undelivered (their count is in Nats-Pending-Messages), and
// statuses that end every request (a consumer leadership change, the consumer deleted, too many
// requests waiting, no JetStream answering). After those it asks again at its next watch, not at
// once, so a lasting refusal costs one request every pullWatch. (After a leadership change
// nats.go's Consume reset its counts but could send no new request, nats-io/nats.go#2063, which
// the consumer worked around by starting a new Consume.)
func (p *puller) onStatus(m *nats.Msg, code string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.heard++
	if code == "100" { // idle heartbeat
		return
	}
	if left := m.Header.Get("Nats-Pending-Messages"); left != "" {
		if n, err := strconv.Atoi(left); err == nil {
			// A request that was filled reports 0 (or less, when only its bytes were left).
			p.owed = max(p.owed-max(n, 0), 0)
			p.topUp()
			return
		}
	}
	p.owed = 0
	reason := code + " " + m.Header.Get("Description")
	if !p.failing || reason != p.lastError {
		p.logger.Warn("Consumer pull error; pulling again", "consumer", p.name, "status", reason)
	}
	p.failing, p.lastError = true, reason
}

// topUp sends a pull request when half of what was asked for has arrived. p.mu is held.
func (p *puller) topUp() {
	if p.stopped || p.owed > pullBatch/2 {
		return
	}
	batch := pullBatch - p.owed
	req := make([]byte, 0, 96)
	req = append(req, `{"batch":`...)
	req = strconv.AppendInt(req, int64(batch), 10)
	req = append(req, `,"expires":`...)
	req = strconv.AppendInt(req, int64(pullExpiry), 10)
	req = append(req, `,"idle_heartbeat":`...)
	req = strconv.AppendInt(req, int64(pullHeartbeat), 10)
	req = append(req, '}')
	if err := p.nc.PublishRequest(p.subject, p.inbox, req); err != nil {
		// Disconnected, most likely: the next watch, or the reconnection, asks again.
		return
	}
	p.owed = pullBatch
	p.asked = time.Now()
}

// watch asks again when the requests are gone: after a reconnection (the server forgot them),
// after a status that ended them, or when the server went quiet for longer than two heartbeats
// while a request should be waiting there.
func (p *puller) watch() {
	t := time.NewTicker(pullWatch)
	defer t.Stop()
	var heard uint64
	quiet := time.Now()
	for {
		select {
		case <-p.stopCh:
			return
		case s := <-p.status:
			if s == nats.CONNECTED {
				p.mu.Lock()
				p.owed = 0
				p.topUp()
				p.mu.Unlock()
			}
		case now := <-t.C:
			p.mu.Lock()
			if p.heard != heard {
				heard, quiet = p.heard, now
			} else if p.owed > 0 && now.Sub(quiet) > 2*pullHeartbeat && now.Sub(p.asked) > 2*pullHeartbeat {
				p.owed = 0
			}
			p.topUp()
			p.mu.Unlock()
		}
	}
}

// drain stops asking for messages and unsubscribes once the messages received are delivered;
// closed is closed then.
func (p *puller) drain() error {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return nil
	}
	p.stopped = true
	p.mu.Unlock()
	close(p.stopCh)
	p.nc.RemoveStatusListener(p.status)
	return p.sub.Drain()
}

// delivery is one message of the pull: what the consumer reads of it, and the acknowledgements
// it sends to the message's reply subject (JetStream's ack protocol).
type delivery struct {
	msg *nats.Msg
	nc  *nats.Conn
}

func (d *delivery) Subject() string      { return d.msg.Subject }
func (d *delivery) Headers() nats.Header { return d.msg.Header }
func (d *delivery) Data() []byte         { return d.msg.Data }

// Sequences reads the stream sequence and the delivery count out of the reply subject; ok is
// false if it is not an ack subject.
func (d *delivery) Sequences() (stream, delivered uint64, ok bool) { return ackSequences(d.msg.Reply) }

// ackSequences reads the stream sequence and the delivery count out of a JetStream ack subject,
// as nats.go's Msg.Metadata does (TestAckSequencesReadsWhatMetadataReads), without an allocation
// and without the fields the consumer does not use: Metadata was 1 of the 30 allocations, and
// 2 % of the CPU, per message in BenchmarkConsume. The subject is
//
//	$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>
//
// or, from newer servers, with <domain>.<account hash> after $JS.ACK and possibly more tokens
// at the end (11 tokens or more).
func ackSequences(reply string) (stream, delivered uint64, ok bool) {
	rest, ok := strings.CutPrefix(reply, "$JS.ACK.")
	if !ok {
		return 0, 0, false
	}
	skip := 2 // stream and consumer
	switch tokens := strings.Count(reply, ".") + 1; {
	case tokens == 9:
	case tokens >= 11:
		skip = 4 // domain, account hash, stream and consumer
	default:
		return 0, 0, false
	}
	for range skip {
		_, rest, _ = strings.Cut(rest, ".")
	}
	d, rest, _ := strings.Cut(rest, ".")
	s, _, _ := strings.Cut(rest, ".")
	return ackNumber(s), ackNumber(d), true
}

// ackNumber reads a number of an ack subject; 0 if it is not one (as nats.go reads it).
func ackNumber(s string) (n uint64) {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0
		}
		n = n*10 + uint64(s[i]-'0')
	}
	return n
}

var (
	ackBody      = []byte("+ACK")
	progressBody = []byte("+WPI")
)

// Ack acknowledges the message without waiting for the server's confirmation.
func (d *delivery) Ack() error { return d.nc.Publish(d.msg.Reply, ackBody) }

// InProgress resets the message's AckWait on the server.
func (d *delivery) InProgress() error { return d.nc.Publish(d.msg.Reply, progressBody) }

// NakWithDelay has the server redeliver the message after delay.
func (d *delivery) NakWithDelay(delay time.Duration) error {
	return d.nc.Publish(d.msg.Reply, []byte(`-NAK {"delay": `+strconv.FormatInt(int64(delay), 10)+`}`))
}

// TermWithReason has the server never redeliver the message; reason goes into its advisory.
func (d *delivery) TermWithReason(reason string) error {
	return d.nc.Publish(d.msg.Reply, []byte("+TERM "+reason))
}
