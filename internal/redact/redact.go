// Package redact hides secrets in text ragsync prints: passwords in URLs of
// any scheme (postgres://, redis://, rediss://, …, including passwords with a
// raw '@'), in Postgres keyword/value connection strings and URL query
// parameters (password=…), and literal secret values taken from the
// configuration (API keys, passwords) wherever they appear, e.g. inside a
// library's error text.
//
// A process has one Redactor, taught the configured secrets at start-up,
// and everything that leaves the process goes through it: log lines and
// printed errors (Writer), command output, dead-letter reasons, the front
// door's replies and dead letters, monitor events and the health
// endpoints' bodies (String, Error). A nil *Redactor masks the password
// patterns only, so a component built without one still hides those.
package redact

import (
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Mask replaces every secret.
const Mask = "xxxxx"

var (
	// userinfo matches "scheme://user:" and everything up to the LAST '@'
	// of the same run of non-space, non-quote characters: a password with a
	// raw '@' ("p@ss") is then hidden whole, whichever '@' a parser picks.
	userinfo = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.\-]*://[^:/?#@\s"'` + "`" + `]*:)[^\s"'` + "`" + `]*@`)
	// keyValue matches password=… in keyword/value DSNs and URL queries,
	// quoted ('se cret', with \' escapes) or bare.
	keyValue = regexp.MustCompile(`(?i)\b((?:password|pass|passwd|pwd|sslpassword)\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'"` + "`" + `]+)`)
)

// String returns s with every password pattern masked.
func String(s string) string {
	s = userinfo.ReplaceAllString(s, "${1}"+Mask+"@")
	return keyValue.ReplaceAllString(s, "${1}"+Mask)
}

// Password returns the password part of a URL or keyword/value connection
// string, "" when it holds none. It reads up to the last '@' as String does,
// so a raw '@' in the password is kept in it.
func Password(dsn string) string {
	if m := userinfo.FindStringSubmatchIndex(dsn); m != nil {
		return dsn[m[3] : m[1]-1]
	}
	if m := keyValue.FindStringSubmatch(dsn); m != nil {
		return strings.Trim(m[2], "'")
	}
	return ""
}

// minSecret is the shortest literal worth masking: shorter ones would mask
// ordinary words and numbers in every line.
const minSecret = 4

// Redactor masks the password patterns of String plus literal secrets added
// with Add. Safe for concurrent use.
type Redactor struct {
	mu      sync.RWMutex
	secrets []string
}

// New returns a Redactor that knows the given literal secrets.
func New(secrets ...string) *Redactor {
	r := &Redactor{}
	r.Add(secrets...)
	return r
}

// Add registers literal secrets; empty and very short values are ignored.
func (r *Redactor) Add(secrets ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range secrets {
		if len(s) >= minSecret && !slices.Contains(r.secrets, s) {
			r.secrets = append(r.secrets, s)
		}
	}
	// Longest first, so a secret containing another is masked whole.
	slices.SortFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
}

// String masks every known secret and password pattern in s.
func (r *Redactor) String(s string) string {
	if r == nil {
		return String(s)
	}
	r.mu.RLock()
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, sec, Mask)
	}
	r.mu.RUnlock()
	return String(s)
}

// Error returns err with its message masked, nil for nil. errors.Is and
// errors.As still see err and its chain: classification is by behaviour,
// never by text, so masking the text changes no decision.
func (r *Redactor) Error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if red := r.String(msg); red != msg {
		return &redactedError{msg: red, err: err}
	}
	return err
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Writer returns a writer that masks secrets in every Write before passing
// it to w. Each Write is redacted on its own, so a secret must not be split
// across writes: slog handlers and fmt.Fprint* write one record a call.
func (r *Redactor) Writer(w io.Writer) io.Writer { return &writer{r: r, w: w} }

type writer struct {
	r *Redactor
	w io.Writer
}

func (w *writer) Write(p []byte) (int, error) {
	if _, err := io.WriteString(w.w, w.r.String(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
