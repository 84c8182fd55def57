package events

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DeadLetter is a message a consumer gave up on, as stored on enforcement.deadletter.<consumer>.
type DeadLetter struct {
	// Sequence is the dead letter's own stream sequence: pass it to ReplayDeadLetter.
	Sequence         uint64
	Consumer         string
	Reason           string
	Attempts         int
	OriginalSubject  string
	OriginalSequence uint64
	EventID          string
	EventType        string
	Header           nats.Header
	Data             []byte
}

// ListDeadLetters returns the dead letters of one consumer, or of all consumers when consumer is
// empty, oldest first.
func ListDeadLetters(ctx context.Context, js jetstream.JetStream, consumer string) ([]DeadLetter, error) {
	subject := SubjectRoot + ".deadletter.>"
	if consumer != "" {
		subject = DeadLetterSubject(consumer)
	}
	oc, err := js.OrderedConsumer(ctx, StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	var out []DeadLetter
	for {
		info, err := oc.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("list dead letters: %w", err)
		}
		if info.NumPending == 0 {
			return out, nil
		}
		batch, err := oc.Fetch(int(min(info.NumPending, 256)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("list dead letters: %w", err)
		}
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("list dead letters: %w", err)
			}
			out = append(out, deadLetterOf(md.Sequence.Stream, m.Headers(), m.Data()))
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, fmt.Errorf("list dead letters: %w", err)
		}
	}
}

func deadLetterOf(seq uint64, h nats.Header, data []byte) DeadLetter {
	attempts, _ := strconv.Atoi(headerValue(h, HeaderDeadAttempts))
	origSeq, _ := strconv.ParseUint(headerValue(h, HeaderDeadSequence), 10, 64)
	return DeadLetter{
		Sequence:         seq,
		Consumer:         headerValue(h, HeaderDeadConsumer),
		Reason:           headerValue(h, HeaderDeadReason),
		Attempts:         attempts,
		OriginalSubject:  headerValue(h, HeaderDeadSubject),
		OriginalSequence: origSeq,
		EventID:          headerValue(h, HeaderID),
		EventType:        headerValue(h, HeaderType),
		Header:           h,
		Data:             data,
	}
}

// ReplayDeadLetter publishes the original event of the dead letter at stream sequence seq again,
// on its original subject, so every consumer that filters it sees it once more (after the
// operator fixed the cause). The event keeps its ce-id, so idempotent consumers stay idempotent;
// its Nats-Msg-Id names the replay, so the server does not drop it as a duplicate. It also keeps
// the original's stream sequence in the Enforcement-Original-Sequence header (the first
// original's, when the dead letter is itself of a replay), which Decode reads into
// Meta.OriginalSequence: a consumer then orders the replay by Meta.DecisionSequence where the
// original stood, not after everything published since.
func ReplayDeadLetter(ctx context.Context, js jetstream.JetStream, seq uint64) (PublishResult, error) {
	stream, err := js.Stream(ctx, StreamName)
	if err != nil {
		return PublishResult{}, fmt.Errorf("replay dead letter %d: %w", seq, err)
	}
	raw, err := stream.GetMsg(ctx, seq)
	if err != nil {
		return PublishResult{}, fmt.Errorf("replay dead letter %d: %w", seq, err)
	}
	if !strings.HasPrefix(raw.Subject, SubjectRoot+".deadletter.") {
		return PublishResult{}, fmt.Errorf("replay dead letter %d: subject %s is not a dead letter", seq, raw.Subject)
	}
	dl := deadLetterOf(seq, raw.Header, raw.Data)
	m := nats.NewMsg(dl.OriginalSubject)
	m.Data = raw.Data
	for k, v := range raw.Header {
		switch k {
		case HeaderDeadReason, HeaderDeadConsumer, HeaderDeadSubject, HeaderDeadSequence, HeaderDeadAttempts, nats.MsgIdHdr:
			continue
		}
		m.Header[k] = v
	}
	if orig := firstOriginal(ctx, stream, dl.OriginalSequence); orig != 0 {
		m.Header.Set(HeaderDeadSequence, strconv.FormatUint(orig, 10))
	}
	m.Header.Set(nats.MsgIdHdr, "replay:"+strconv.FormatUint(seq, 10)+":"+dl.EventID)
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		return PublishResult{}, fmt.Errorf("replay dead letter %d: %w", seq, err)
	}
	return PublishResult{Sequence: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// firstOriginal returns the stream sequence of the first original of the message at seq: seq
// itself, or, when that message is a replay (its own Enforcement-Original-Sequence header says
// so, and it is still in the stream), the earlier sequence the header names.
func firstOriginal(ctx context.Context, stream jetstream.Stream, seq uint64) uint64 {
	if seq == 0 {
		return 0
	}
	msg, err := stream.GetMsg(ctx, seq)
	if err != nil {
		return seq
	}
	if prev, err := strconv.ParseUint(headerValue(msg.Header, HeaderDeadSequence), 10, 64); err == nil && prev != 0 && prev < seq {
		return prev
	}
	return seq
}
