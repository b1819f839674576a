package cdc

import (
	"fmt"
	"strconv"
	"strings"
)

// Version orders the changes of one document. Parts are compared element by
// element (a shorter tuple that is a prefix of a longer one sorts first); Kind
// names the source that produced them ("pg", "mysql", "sqlserver", "mongo",
// "ts" for the ts_ms fallback). Versions of different kinds compare by kind
// name, which only matters when one document is fed by two connectors.
type Version struct {
	Kind  string
	Parts []uint64
}

// Compare returns -1, 0 or +1 as v sorts before, equal to or after o.
func (v Version) Compare(o Version) int {
	if c := strings.Compare(v.Kind, o.Kind); c != 0 {
		return c
	}
	for i := 0; i < len(v.Parts) && i < len(o.Parts); i++ {
		switch {
		case v.Parts[i] < o.Parts[i]:
			return -1
		case v.Parts[i] > o.Parts[i]:
			return 1
		}
	}
	switch {
	case len(v.Parts) < len(o.Parts):
		return -1
	case len(v.Parts) > len(o.Parts):
		return 1
	}
	return 0
}

// IsZero reports whether v carries no ordering information.
func (v Version) IsZero() bool { return v.Kind == "" && len(v.Parts) == 0 }

// String renders v so that byte-wise (C collation) string order equals
// Compare order: "pg:00000000016b3f40.0000000000000232". The sink stores
// this form in a text column.
func (v Version) String() string {
	var b strings.Builder
	b.WriteString(v.Kind)
	b.WriteByte(':')
	for i, p := range v.Parts {
		if i > 0 {
			b.WriteByte('.')
		}
		fmt.Fprintf(&b, "%016x", p)
	}
	return b.String()
}

// ParseVersion is the inverse of Version.String.
func ParseVersion(s string) (Version, error) {
	kind, rest, ok := strings.Cut(s, ":")
	if !ok || kind == "" {
		return Version{}, fmt.Errorf("parse version %q: want kind:hex.hex…", s)
	}
	v := Version{Kind: kind}
	if rest == "" {
		return v, nil
	}
	for _, p := range strings.Split(rest, ".") {
		n, err := strconv.ParseUint(p, 16, 64)
		if err != nil {
			return Version{}, fmt.Errorf("parse version %q: %w", s, err)
		}
		v.Parts = append(v.Parts, n)
	}
	return v, nil
}

// MarshalText implements encoding.TextMarshaler.
func (v Version) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (v *Version) UnmarshalText(b []byte) error {
	p, err := ParseVersion(string(b))
	if err != nil {
		return err
	}
	*v = p
	return nil
}
