package chunker_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/chunker"
)

func TestConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     chunker.Config
		wantErr []string
	}{
		{name: "defaults", cfg: chunker.Config{}},
		{name: "greedy", cfg: chunker.Config{Strategy: "greedy", MinTokens: 1, TargetTokens: 8, MaxTokens: 8}},
		{name: "unknown strategy", cfg: chunker.Config{Strategy: "fixed"},
			wantErr: []string{`chunker.strategy: "fixed" is not a strategy, use "content-defined" or "greedy"`}},
		{name: "max below target", cfg: chunker.Config{MaxTokens: 256},
			wantErr: []string{"chunker.max_tokens: must be >= target_tokens (512), got 256"}},
		{name: "all problems at once", cfg: chunker.Config{Strategy: "x", MinTokens: -1, TargetTokens: -5, MaxTokens: 4},
			wantErr: []string{"chunker.strategy:", "chunker.min_tokens: must be >= 1, got -1",
				"chunker.target_tokens: must be >= min_tokens (-1), got -5", "chunker.max_tokens: must be >= 8, got 4"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.WithDefaults().Validate()
			_, newErr := chunker.New(tc.cfg)
			if len(tc.wantErr) == 0 {
				require.NoError(t, err)
				require.NoError(t, newErr)
				return
			}
			require.Error(t, err)
			require.Error(t, newErr)
			for _, w := range tc.wantErr {
				require.ErrorContains(t, err, w)
			}
		})
	}
	require.Equal(t, chunker.Config{Strategy: "content-defined", TargetTokens: 512, MinTokens: 128, MaxTokens: 1024, RefineTargetTokens: -1},
		chunker.Config{}.WithDefaults())
}

func TestNormalizeHash(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "empty", in: "", want: ""},
		{name: "whitespace runs", in: "  a \t\n b\r\n\u00a0c  ", want: "a b c"},
		{name: "nfc", in: "cafe\u0301", want: "caf\u00e9"},
		{name: "case kept", in: "Hello", want: "Hello"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, chunker.Normalize(tc.in))
			require.Equal(t, chunker.Hash(tc.want), chunker.Hash(tc.in))
		})
	}
	// The hash is a storage contract: pin it.
	require.Equal(t, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", chunker.Hash(" \n"))
	require.Equal(t, "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824", chunker.Hash("\thello\n"))
	require.NotEqual(t, chunker.Hash("a b"), chunker.Hash("ab"))
}

func TestCountTokens(t *testing.T) {
	t.Parallel()
	require.Equal(t, 0, chunker.CountTokens(""))
	require.Equal(t, 1, chunker.CountTokens("hello"))
	require.Equal(t, 2, chunker.CountTokens("hello world"))
	require.Positive(t, chunker.CountTokens(string([]byte{0xff, 0xfe})))
}

func mustNew(t testing.TB, cfg chunker.Config) *chunker.Chunker {
	t.Helper()
	c, err := chunker.New(cfg)
	require.NoError(t, err)
	return c
}

func texts(chunks []chunker.Chunk) []string {
	var out []string
	for _, c := range chunks {
		out = append(out, c.Text)
	}
	return out
}

func TestSplit(t *testing.T) {
	t.Parallel()
	small := chunker.Config{MinTokens: 4, TargetTokens: 12, MaxTokens: 16}
	longWord := strings.Repeat("x7", 60)
	tests := []struct {
		name string
		cfg  chunker.Config
		in   string
		want []string
	}{
		{name: "empty", cfg: small, in: "", want: nil},
		{name: "whitespace", cfg: small, in: "\n \t\r\n", want: nil},
		{name: "one short paragraph", cfg: small, in: "  Hello world.  \n", want: []string{"Hello world."}},
		{name: "greedy packs up to target", cfg: withStrategy(small, "greedy"),
			in:   "aa bb cc.\n\ndd ee ff.\n\ngg hh ii.",
			want: []string{"aa bb cc.\n\ndd ee ff.", "gg hh ii."}},
		{name: "greedy cuts at heading once min reached", cfg: withStrategy(small, "greedy"),
			in:   "one two three four five.\n\n# Next\n\nsix.",
			want: []string{"one two three four five.", "# Next\n\nsix."}},
		{name: "greedy keeps heading with short chunk", cfg: withStrategy(small, "greedy"),
			in:   "Hi.\n\n# Next\n\nsix.",
			want: []string{"Hi.\n\n# Next\n\nsix."}},
		{name: "oversize paragraph splits at sentences", cfg: withStrategy(small, "greedy"),
			in: "Alpha beta gamma delta epsilon zeta eta. Theta iota kappa lambda mu nu xi. Omicron pi rho sigma tau upsilon.",
			want: []string{"Alpha beta gamma delta epsilon zeta eta.", "Theta iota kappa lambda mu nu xi.",
				"Omicron pi rho sigma tau upsilon."}},
		{name: "oversize code splits at lines",
			cfg:  chunker.Config{Strategy: "greedy", MinTokens: 4, TargetTokens: 16, MaxTokens: 20},
			in:   "```\nfoo(bar, baz, qux, quux)\nfoo(bar, baz, qux, quux)\n```",
			want: []string{"```\nfoo(bar, baz, qux, quux)", "foo(bar, baz, qux, quux)\n```"}},
		{name: "small code kept whole with blank line", cfg: withStrategy(small, "greedy"),
			in:   "```\na\n\nb\n```",
			want: []string{"```\na\n\nb\n```"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := mustNew(t, tc.cfg)
			got := c.Split(tc.in)
			require.Equal(t, tc.want, texts(got))
			checkInvariants(t, c, tc.cfg, tc.in, got)
		})
	}
	t.Run("unsplittable word is hard split within max", func(t *testing.T) {
		t.Parallel()
		for _, s := range []string{"greedy", "content-defined"} {
			c := mustNew(t, withStrategy(small, s))
			got := c.Split("start " + longWord + " end")
			require.Greater(t, len(got), 2)
			checkInvariants(t, c, small, "start "+longWord+" end", got)
		}
	})
}

func withStrategy(c chunker.Config, s string) chunker.Config {
	c.Strategy = s
	return c
}

func TestSplitTestdata(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"guide.md", "crlf.md"} {
		b, err := os.ReadFile("testdata/" + name)
		require.NoError(t, err)
		for _, cfg := range []chunker.Config{
			{},
			{Strategy: "greedy"},
			{MinTokens: 8, TargetTokens: 24, MaxTokens: 40},
			{Strategy: "greedy", MinTokens: 8, TargetTokens: 24, MaxTokens: 40},
		} {
			t.Run(fmt.Sprintf("%s/%+v", name, cfg), func(t *testing.T) {
				c := mustNew(t, cfg)
				checkInvariants(t, c, cfg, string(b), c.Split(string(b)))
			})
		}
	}
}

// paragraphs builds n deterministic prose paragraphs of 1–3 sentences.
func paragraphs(seed uint64, n int) []string {
	vocab := strings.Fields("index vector change event document chunk embed model stream replica lag " +
		"offset commit batch token hash boundary edit paragraph schema table version order retry cache")
	r := rand.New(rand.NewPCG(seed, seed))
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for s := 1 + r.IntN(3); s > 0; s-- {
			w := 6 + r.IntN(8)
			for j := 0; j < w; j++ {
				word := vocab[r.IntN(len(vocab))]
				if j == 0 {
					word = strings.ToUpper(word[:1]) + word[1:]
				}
				b.WriteString(word)
				if j < w-1 {
					b.WriteByte(' ')
				}
			}
			b.WriteString(fmt.Sprintf(" %d. ", r.IntN(1000)))
		}
		out[i] = strings.TrimSpace(b.String())
	}
	return out
}

func survivors(before, after []chunker.Chunk) int {
	old := map[string]bool{}
	for _, c := range before {
		old[c.Hash] = true
	}
	n := 0
	for _, c := range after {
		if old[c.Hash] {
			n++
		}
	}
	return n
}

// TestEditStability changes one paragraph in the middle of a 20-paragraph
// document (or inserts one there): with content-defined boundaries only the
// chunks around the edit change.
func TestEditStability(t *testing.T) {
	t.Parallel()
	cfg := chunker.Config{MinTokens: 12, TargetTokens: 48, MaxTokens: 192}
	edits := map[string]func(ps []string) []string{
		"grow paragraph": func(ps []string) []string {
			ps[10] += " An inserted sentence makes this paragraph longer than it was 7."
			return ps
		},
		"rewrite paragraph": func(ps []string) []string {
			ps[10] = "Completely different words now stand here 1."
			return ps
		},
		"insert paragraph": func(ps []string) []string {
			return append(ps[:10:10], append([]string{"A new paragraph about nothing in particular 5."}, ps[10:]...)...)
		},
	}
	for name, edit := range edits {
		for seed := uint64(1); seed <= 5; seed++ {
			t.Run(fmt.Sprint(name, "/", seed), func(t *testing.T) {
				t.Parallel()
				ps := paragraphs(seed, 20)
				before := strings.Join(ps, "\n\n")
				after := strings.Join(edit(ps), "\n\n")

				cdc := mustNew(t, cfg)
				b, a := cdc.Split(before), cdc.Split(after)
				checkInvariants(t, cdc, cfg, after, a)
				require.GreaterOrEqual(t, len(b), 6, "document too short to measure stability")
				kept := survivors(b, a)
				// The edited chunk changes, and its neighbour when the edit
				// removes or adds a cut point; the rest must survive.
				require.GreaterOrEqual(t, kept, len(b)-3, "content-defined kept %d of %d chunks", kept, len(b))
				require.Greater(t, 2*kept, len(b))

				g := mustNew(t, withStrategy(cfg, "greedy"))
				gb, ga := g.Split(before), g.Split(after)
				t.Logf("content-defined kept %d/%d chunks; greedy kept %d/%d", kept, len(b), survivors(gb, ga), len(gb))
			})
		}
	}
}

// TestContentDefinedMeanSize checks the mask: chunks average near the
// target over many paragraphs, with no chunk under min except the last.
func TestContentDefinedMeanSize(t *testing.T) {
	t.Parallel()
	cfg := chunker.Config{MinTokens: 32, TargetTokens: 128, MaxTokens: 512}
	c := mustNew(t, cfg)
	text := strings.Join(paragraphs(42, 400), "\n\n")
	chunks := c.Split(text)
	total := 0
	for i, ch := range chunks {
		total += ch.Tokens
		if i < len(chunks)-1 {
			require.GreaterOrEqual(t, ch.Tokens, cfg.MinTokens-2, "chunk %d", i)
		}
	}
	mean := float64(total) / float64(len(chunks))
	t.Logf("%d chunks, mean %.1f tokens", len(chunks), mean)
	require.InDelta(t, float64(cfg.TargetTokens), mean, float64(cfg.TargetTokens)*0.35)
}

func TestSplitConcurrent(t *testing.T) {
	t.Parallel()
	c := mustNew(t, chunker.Config{MinTokens: 16, TargetTokens: 64, MaxTokens: 128})
	text := strings.Join(paragraphs(7, 30), "\n\n")
	want := c.Split(text)
	done := make(chan []chunker.Chunk)
	for range 4 {
		go func() { done <- c.Split(text) }()
	}
	for range 4 {
		require.Equal(t, want, <-done)
	}
}

// TestEditStabilityBeatsGreedy inserts a paragraph in the middle of longer
// documents whose chunks hold several paragraphs: greedy packing shifts the
// boundaries after the insertion, content-defined ones resynchronise.
func TestEditStabilityBeatsGreedy(t *testing.T) {
	t.Parallel()
	cfg := chunker.Config{MinTokens: 64, TargetTokens: 256, MaxTokens: 512}
	cdc, greedy := mustNew(t, cfg), mustNew(t, withStrategy(cfg, "greedy"))
	var keptC, totalC, keptG, totalG int
	for seed := uint64(1); seed <= 20; seed++ {
		ps := paragraphs(seed, 60)
		before := strings.Join(ps, "\n\n")
		ps = append(ps[:30:30], append([]string{"A new paragraph about nothing in particular 5."}, ps[30:]...)...)
		after := strings.Join(ps, "\n\n")
		b, a := cdc.Split(before), cdc.Split(after)
		keptC, totalC = keptC+survivors(b, a), totalC+len(b)
		b, a = greedy.Split(before), greedy.Split(after)
		keptG, totalG = keptG+survivors(b, a), totalG+len(b)
	}
	fc, fg := float64(keptC)/float64(totalC), float64(keptG)/float64(totalG)
	t.Logf("chunks kept: content-defined %d/%d (%.2f), greedy %d/%d (%.2f)", keptC, totalC, fc, keptG, totalG, fg)
	require.Greater(t, fc, fg)
	require.Greater(t, fc, 0.8)
}
