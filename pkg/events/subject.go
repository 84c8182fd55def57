package events

import (
	"fmt"
	"strings"
)

// SubjectRoot is the first token of every Enforcement subject: `nats sub 'enforcement.>'` shows
// every event the system publishes.
const SubjectRoot = "enforcement"

// emptyToken stands for an empty key. '~' is always escaped inside real keys, so it cannot
// collide with one.
const emptyToken = "~"

// EscapeToken makes one subject token out of an arbitrary key. Letters, digits, '-' and '_' are
// kept; every other byte (including '.', '*', '>', '%', spaces and non-ASCII bytes) becomes "%XX"
// with upper-case hex, so the token is never split, never a wildcard, and can be reversed with
// UnescapeToken. An empty key becomes "~".
func EscapeToken(key string) string {
	if key == "" {
		return emptyToken
	}
	if !needsEscape(key) {
		return key
	}
	var b strings.Builder
	b.Grow(len(key) + 8)
	for i := 0; i < len(key); i++ {
		c := key[i]
		if tokenSafe(c) {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// UnescapeToken reverses EscapeToken. It fails on a malformed escape sequence.
func UnescapeToken(token string) (string, error) {
	if token == emptyToken {
		return "", nil
	}
	if !strings.Contains(token, "%") {
		return token, nil
	}
	var b strings.Builder
	for i := 0; i < len(token); i++ {
		if token[i] != '%' {
			b.WriteByte(token[i])
			continue
		}
		if i+2 >= len(token) {
			return "", fmt.Errorf("subject token %q: truncated escape at byte %d", token, i)
		}
		hi, ok1 := unhex(token[i+1])
		lo, ok2 := unhex(token[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("subject token %q: bad escape at byte %d", token, i)
		}
		b.WriteByte(hi<<4 | lo)
		i += 2
	}
	return b.String(), nil
}

func needsEscape(key string) bool {
	for i := 0; i < len(key); i++ {
		if !tokenSafe(key[i]) {
			return true
		}
	}
	return false
}

func tokenSafe(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// Subject derives the NATS subject an event is published on from the subject pattern in the
// catalog and the event's own key values. It is the only place subjects are built.
func Subject(e Event) string {
	d := mustDescribe(e.Type())
	values := e.subjectKeys()
	tokens := make([]string, 0, len(d.Subject))
	i := 0
	for _, t := range d.Subject {
		if isParam(t) {
			tokens = append(tokens, EscapeToken(values[i]))
			i++
			continue
		}
		tokens = append(tokens, t)
	}
	return strings.Join(tokens, ".")
}

// DeadLetterSubject is where the consumer helper puts the messages the named consumer gave up on.
func DeadLetterSubject(consumer string) string {
	return SubjectRoot + ".deadletter." + EscapeToken(consumer)
}

func isParam(token string) bool {
	return strings.HasPrefix(token, "{") && strings.HasSuffix(token, "}")
}
