package events_test

import (
	"strings"
	"testing"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// TestRedactURLHidesCredentials: user information, query values and fragments are replaced or
// dropped, a malformed value is never echoed, and a URL without credentials is unchanged.
func TestRedactURLHidesCredentials(t *testing.T) {
	const secret = "s3cr3t-CANARY"
	for _, tt := range []struct {
		in, want    string
		credentials bool
	}{
		{"https://hooks.example.com/ci/notify", "https://hooks.example.com/ci/notify", false},
		{"http://hooks.example.com:8080/x", "http://hooks.example.com:8080/x", false},
		{"https://user:" + secret + "@hooks.example.com/x", "https://redacted@hooks.example.com/x", true},
		{"https://" + secret + "@hooks.example.com/x", "https://redacted@hooks.example.com/x", true},
		{"https://hooks.example.com/x?token=" + secret + "&team=a", "https://hooks.example.com/x?token=redacted&team=redacted", true},
		{"https://hooks.example.com/x?" + secret, "https://hooks.example.com/x?redacted", true},
		{"https://hooks.example.com/x?=" + secret, "https://hooks.example.com/x?redacted", true},
		{"https://hooks.example.com/x#access_token=" + secret, "https://hooks.example.com/x", true},
		{"https://hooks.example.com/x?", "https://hooks.example.com/x", true},
		{"hooks.example.com:" + secret, "hooks.example.com:redacted", true},
		{"https://user:" + secret + "@hooks.example.com:99999999999/%zz", events.InvalidURL, true},
		{"https://hooks example.com/?token=" + secret + "\x7f", events.InvalidURL, true},
	} {
		got := events.RedactURL(tt.in)
		if got != tt.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if strings.Contains(got, secret) {
			t.Errorf("RedactURL(%q) = %q shows the secret", tt.in, got)
		}
		if c := events.URLHasCredentials(tt.in); c != tt.credentials {
			t.Errorf("URLHasCredentials(%q) = %t, want %t", tt.in, c, tt.credentials)
		}
		if again := events.RedactURL(got); got != events.InvalidURL && again != got {
			t.Errorf("RedactURL is not stable: %q, then %q", got, again)
		}
	}
}

// TestRedactURLsInText: every URL quoted in a message is redacted, the rest of it is kept.
func TestRedactURLsInText(t *testing.T) {
	in := "call(['https://bot:s3cr3t@a.example/x?token=s3cr3t'], map[]): GET http://b.example/y?k=s3cr3t failed (see https://docs.example/z)"
	want := "call(['https://redacted@a.example/x?token=redacted'], map[]): GET http://b.example/y?k=redacted failed (see https://docs.example/z)"
	if got := events.RedactURLsIn(in); got != want {
		t.Errorf("RedactURLsIn = %q, want %q", got, want)
	}
}
