package chunker

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBlocks(t *testing.T) {
	t.Parallel()
	type blk struct {
		Text string
		Kind blockKind
	}
	tests := []struct {
		name string
		in   string
		want []blk
	}{
		{name: "empty", in: "", want: nil},
		{name: "whitespace only", in: " \n\t\n\u00a0\n", want: nil},
		{name: "paragraphs", in: "one\ntwo\n\n\nthree", want: []blk{{"one\ntwo", kindText}, {"three", kindText}}},
		{name: "atx heading needs a space", in: "# Title\n#hashtag\nbody", want: []blk{
			{"# Title", kindHeading}, {"#hashtag\nbody", kindText}}},
		{name: "seven hashes is text", in: "####### x", want: []blk{{"####### x", kindText}}},
		{name: "setext", in: "Title\nmore\n===\nbody\n\nSub\n---", want: []blk{
			{"Title\nmore\n===", kindHeading}, {"body", kindText}, {"Sub\n---", kindHeading}}},
		{name: "thematic break after blank", in: "a\n\n---\n\nb", want: []blk{
			{"a", kindText}, {"---", kindText}, {"b", kindText}}},
		{name: "fence keeps blank lines and hashes", in: "x\n```go\na\n\n# b\n```\ny", want: []blk{
			{"x", kindText}, {"```go\na\n\n# b\n```", kindCode}, {"y", kindText}}},
		{name: "longer closing fence", in: "~~~~\na\n~~~\n~~~~~\nb", want: []blk{
			{"~~~~\na\n~~~\n~~~~~", kindCode}, {"b", kindText}}},
		{name: "unclosed fence runs to end", in: "```\na\n\nb", want: []blk{{"```\na\n\nb", kindCode}}},
		{name: "list items", in: "- a\n  cont\n- b\n1. c\n2) d\n-x", want: []blk{
			{"- a\n  cont", kindListItem}, {"- b", kindListItem}, {"1. c", kindListItem},
			{"2) d\n-x", kindListItem}}},
		{name: "list dash is not setext", in: "- a\n---", want: []blk{{"- a", kindListItem}, {"---", kindText}}},
		{name: "crlf", in: "T\r\n=\r\n\r\nbody\r\n", want: []blk{{"T\r\n=", kindHeading}, {"body", kindText}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []blk
			for _, s := range blocks(tc.in) {
				got = append(got, blk{tc.in[s.start:s.end], s.kind})
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestBlocksGuide(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/guide.md")
	require.NoError(t, err)
	text := string(b)
	var kinds []blockKind
	var code string
	for _, s := range blocks(text) {
		kinds = append(kinds, s.kind)
		if s.kind == kindCode {
			code = text[s.start:s.end]
		}
	}
	require.Equal(t, []blockKind{
		kindHeading, kindText, kindHeading, kindText,
		kindListItem, kindListItem, kindListItem, kindListItem, kindListItem, kindListItem,
		kindCode, kindHeading, kindText, kindText, kindText,
	}, kinds)
	require.Contains(t, code, "// # not a heading")
}

func TestSentences(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		kind blockKind
		want []string
	}{
		{name: "prose", in: "One. Two! (Three?) Four", want: []string{"One.", "Two!", "(Three?)", "Four"}},
		{name: "no space after dot", in: "v1.2 is out.Next", want: []string{"v1.2 is out.Next"}},
		{name: "closing quote", in: `He said "stop." Then left.`, want: []string{`He said "stop."`, "Then left."}},
		{name: "cjk", in: "東京。次の文。", want: []string{"東京。", "次の文。"}},
		{name: "code splits at lines", in: "a := 1\nb := 2. c\n", kind: kindCode, want: []string{"a := 1", "b := 2. c"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, s := range sentences(tc.in, span{0, len(tc.in), tc.kind}) {
				got = append(got, tc.in[s.start:s.end])
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestHardSplit(t *testing.T) {
	t.Parallel()
	in := "é" + string([]byte{0xff}) + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa日本語日本語日本語"
	pieces := hardSplit(in, span{0, len(in), kindText}, 3)
	require.Greater(t, len(pieces), 3)
	joined := ""
	for _, p := range pieces {
		s := in[p.start:p.end]
		require.NotEmpty(t, s)
		require.LessOrEqual(t, CountTokens(s), 3, "piece %q", s)
		joined += s
	}
	require.Equal(t, in, joined)
}
