package chunker_test

import (
	"os"
	"strings"
	"testing"

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
			for b.Loop() {
				c.Split(text)
			}
		})
	}
}

func BenchmarkCountTokens(b *testing.B) {
	text := longMarkdown(b)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		chunker.CountTokens(text)
	}
}
