package chunker_test

import (
	"math/rand/v2"
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

// BenchmarkChunkEditSimilarityRewrite prices the edit measure of an update
// that rewrites a ~4 KB document in words of a small vocabulary (as the
// freshness bench's changes do): the distance is large and the texts share
// many words, the case where the exact distance's search grows with the
// square of the words, which the cap bounds.
func BenchmarkChunkEditSimilarityRewrite(b *testing.B) {
	vocab := strings.Fields("harbour lighthouse glacier orchard valley river meadow granite ferry tide market lantern bridge quarry")
	doc := func(seed uint64) []chunker.Piece {
		rng := rand.New(rand.NewPCG(seed, 1))
		var ps []chunker.Piece
		for range 8 {
			var sb strings.Builder
			for w := range 80 {
				if w > 0 {
					sb.WriteByte(' ')
				}
				sb.WriteString(vocab[rng.IntN(len(vocab))])
			}
			ps = append(ps, chunker.Piece{Hash: chunker.Hash(sb.String()), Text: sb.String()})
		}
		return ps
	}
	old, cur := doc(1), doc(2)
	cpu := cpuTime(b)
	for b.Loop() {
		chunker.ChunkEditSimilarity(old, cur)
	}
	reportCPU(b, cpu)
}
