package embedder_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
)

// BenchmarkEmbed measures the client's own cost per call of 64 chunk-sized
// texts (~2 KB each): counting, batching, JSON. The server answers canned
// vectors without counting, so its cost is small and the same in every
// run; cpu-ns/op (getrusage, both sides in this process) is the figure to
// compare on a shared machine. "counted" passes the chunker's counts, as
// the pipeline does; "uncounted" makes the client count.
func BenchmarkEmbed(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Input []string }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var sb strings.Builder
		sb.WriteString(`{"object":"list","data":[`)
		for i := range req.Input {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `{"object":"embedding","index":%d,"embedding":[0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5]}`, i)
		}
		sb.WriteString(`],"usage":{"prompt_tokens":1,"total_tokens":1}}`)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(sb.String()))
	}))
	defer srv.Close()
	c, err := embedder.NewOpenAI(embedder.Config{BaseURL: srv.URL, Model: "bench", Dimensions: 8, MaxBatchInputs: 16, EncodingFormat: embedder.EncodingFloat})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	texts := make([]string, 64)
	tokens := make([]int, len(texts))
	for i := range texts {
		var sb strings.Builder
		for k := 0; sb.Len() < 2000; k++ {
			fmt.Fprintf(&sb, "Paragraph %d of chunk %d says what the release changed, and why it matters to operators. ", k, i)
		}
		texts[i] = sb.String()
		tokens[i] = chunker.CountTokens(texts[i])
	}
	for _, counted := range []bool{true, false} {
		name := map[bool]string{true: "counted", false: "uncounted"}[counted]
		b.Run(name, func(b *testing.B) {
			cpu := cpuTime(b)
			for b.Loop() {
				var err error
				if counted {
					_, err = c.EmbedCounted(b.Context(), texts, tokens)
				} else {
					_, err = c.Embed(b.Context(), texts)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the process's user+system CPU time (see BenchmarkEmbed).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
