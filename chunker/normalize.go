package chunker

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// Normalize returns s in Unicode NFC with every run of whitespace replaced by
// one space and no leading or trailing whitespace. Two texts that differ only
// in composition or layout normalise to the same string, so re-wrapping a
// paragraph does not re-embed it.
func Normalize(s string) string {
	return strings.Join(strings.Fields(norm.NFC.String(s)), " ")
}

// Hash returns the hex SHA-256 of Normalize(s): the content key of a chunk.
func Hash(s string) string {
	sum := sha256.Sum256([]byte(Normalize(s)))
	return hex.EncodeToString(sum[:])
}
