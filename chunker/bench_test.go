package chunker_test

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ragsync/ragsync/chunker"
)

// longMarkdown is a ~200 KB Markdown document: the guide repeated with
// prose paragraphs between copies.
func longMarkdown(b *testing.B) string {
	guide, err := os.ReadFile("testdata/guide.md")
	if err != nil {
		b.Fatal(err)
	}
	var sb strings.Builder
	for i := 0; sb.Len() < 200_000; i++ {
		sb.Write(guide)
		sb.WriteString("\n\n")
		sb.WriteString(strings.Join(paragraphs(uint64(i), 10), "\n\n"))
		sb.WriteString("\n\n")
	}
	return sb.String()
}

func BenchmarkSplit(b *testing.B) {
	text := longMarkdown(b)
	for _, s := range []string{"content-defined", "greedy"} {
		b.Run(s, func(b *testing.B) {
			c := mustNew(b, chunker.Config{Strategy: s})
			b.SetBytes(int64(len(text)))
			cpu := cpuTime(b)
			for b.Loop() {
				c.Split(text)
			}
			reportCPU(b, cpu)
		})
	}
}

func BenchmarkCountTokens(b *testing.B) {
	text := longMarkdown(b)
	b.SetBytes(int64(len(text)))
	cpu := cpuTime(b)
	for b.Loop() {
		chunker.CountTokens(text)
	}
	reportCPU(b, cpu)
}

// cpuTime is the process's user+system CPU time. On a machine shared with
// other work, wall time per op swings several-fold between runs; CPU time
// per op (cpu-ns/op) is what a change to the chunker moves.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
}
