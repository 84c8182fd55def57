package events

import (
	"net/url"
	"regexp"
	"strings"
)

// Redacted replaces a credential in a URL that RedactURL shows.
const Redacted = "redacted"

// InvalidURL is what RedactURL shows for a value that is not a URL: the value itself is never
// shown, since a malformed URL may still hold a token.
const InvalidURL = "(not a valid URL)"

// RedactURL is the one way a URL is shown or stored (events, records, dead letters, status, logs,
// metrics): its user information is replaced by "redacted" (a token often stands where the user
// name goes), every query value by "redacted" (a parameter without "=" entirely, since it may be
// the token itself; names are kept so that an operator sees which parameter was set), and the
// fragment is dropped. Scheme, host, port and path are kept: a token written into the path is
// not recognised. A value that does not parse as a URL becomes InvalidURL. The result is
// deterministic, so ids and hashes computed from it stay stable.
func RedactURL(raw string) string {
	redacted, _ := redactURL(raw)
	return redacted
}

// URLHasCredentials reports whether RedactURL changes raw other than by dropping an empty
// fragment: whether raw has user information, a query or a fragment, or does not parse.
func URLHasCredentials(raw string) bool {
	_, changed := redactURL(raw)
	return changed
}

// redactURL is RedactURL, and whether it hid anything.
func redactURL(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return InvalidURL, true
	}
	changed := false
	if u.User != nil {
		u.User = url.User(Redacted)
		changed = true
	}
	if u.RawQuery != "" || u.ForceQuery {
		u.RawQuery = redactQuery(u.RawQuery)
		u.ForceQuery = false
		changed = true
	}
	if u.Fragment != "" || u.RawFragment != "" {
		changed = true
	}
	u.Fragment, u.RawFragment = "", ""
	if u.Opaque != "" {
		// "host:token" parses as scheme "host" with opaque "token": nothing in it is known not
		// to be a secret.
		u.Opaque = Redacted
		changed = true
	}
	return u.String(), changed
}

// redactQuery keeps the names of a raw query's parameters and replaces their values.
func redactQuery(raw string) string {
	if raw == "" {
		return ""
	}
	params := strings.Split(raw, "&")
	for i, p := range params {
		name, _, hasValue := strings.Cut(p, "=")
		if !hasValue || name == "" {
			params[i] = Redacted
			continue
		}
		params[i] = name + "=" + Redacted
	}
	return strings.Join(params, "&")
}

// urlInText finds what looks like an absolute URL in a text: a scheme, "://" and everything up
// to white space, a quote or a closing bracket.
var urlInText = regexp.MustCompile("[A-Za-z][A-Za-z0-9+.-]*://[^\\s'\"`<>()\\[\\]{}]+")

// RedactURLsIn is text with every absolute URL in it redacted as RedactURL does. It is for
// messages that quote input they did not build, such as a template engine's error that repeats
// the expression it failed on.
func RedactURLsIn(text string) string {
	return urlInText.ReplaceAllStringFunc(text, RedactURL)
}
