package monitor

import (
	_ "embed"
	"strings"
)

// probes.txt holds the shipped canary texts, one a line: short and long,
// prose and code, several languages and registers, so that a model swap
// moves at least some of them whatever the new model is good at.
//
//go:embed probes.txt
var probesTxt string

// DefaultProbes returns the shipped canary texts.
func DefaultProbes() []string {
	var out []string
	for l := range strings.SplitSeq(probesTxt, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
