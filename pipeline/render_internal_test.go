package pipeline

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// renderByRegexp is render as it was before templates were parsed once: the
// placeholders of each line replaced by matching them on every row.
func renderByRegexp(t TableConfig, row map[string]any) string {
	lines := strings.Split(t.Text, "\n")
	out := lines[:0:0]
	for _, line := range lines {
		filled, holes := false, false
		r := placeholder.ReplaceAllStringFunc(line, func(s string) string {
			holes = true
			v := textOf(row[placeholder.FindStringSubmatch(s)[1]])
			if strings.TrimSpace(v) != "" {
				filled = true
			}
			return v
		})
		if holes && !filled {
			continue
		}
		out = append(out, r)
	}
	return strings.Join(out, "\n")
}

// A template parsed once renders every row as matching it on each row did.
func TestRenderMatchesPerRowMatching(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	pieces := []string{"{{a}}", "{{ b }}", "{{c}}", "{{a}}{{b}}", "{{ }}", "{{x y}}", "{a}", "}}", "{{", "# ", "Title: ", " ", "\n", "\n\n", "$1", "text"}
	values := []any{nil, "", " ", "\n", "v", "two words", json.Number("12"), true, []any{"p", "q"}, map[string]any{"k": "v"}, "$1 ${a}"}
	for range 3000 {
		var tpl strings.Builder
		for range rng.IntN(8) {
			tpl.WriteString(pieces[rng.IntN(len(pieces))])
		}
		row := map[string]any{}
		for _, c := range []string{"a", "b", "c"} {
			if rng.IntN(4) > 0 {
				row[c] = values[rng.IntN(len(values))]
			}
		}
		tbl := TableConfig{Text: tpl.String()}
		if tbl.Text == "" {
			continue
		}
		require.Equal(t, renderByRegexp(tbl, row), tbl.render(row), "template %q row %v", tbl.Text, row)
	}
}

// Declared fields render like the text template and land in the metadata
// beside the copied columns; a field whose columns are all empty is left
// out, so a filter never matches a bare separator.
func TestFieldsRenderIntoMetadata(t *testing.T) {
	tbl := TableConfig{
		Metadata: []string{"lang"},
		Fields:   map[string]string{"semantic_tag": "{{category}}/{{kind}}", "source": "cms", "owner": "{{team}}"},
	}
	row := map[string]any{"lang": "en", "category": "billing", "kind": json.Number("7"), "team": ""}
	require.Equal(t, map[string]any{"lang": "en", "semantic_tag": "billing/7", "source": "cms"}, tbl.metadata(row))
}

// The render hash changes with the text and with the chunker, and with
// nothing else: equal hashes promise equal chunks.
func TestRenderHashCoversTextAndChunker(t *testing.T) {
	a := renderHash("greedy/512/128/1024", "hello world")
	require.Equal(t, a, renderHash("greedy/512/128/1024", "hello world"))
	require.NotEqual(t, a, renderHash("greedy/512/128/1024", "hello world!"))
	require.NotEqual(t, a, renderHash("greedy/256/128/1024", "hello world"))
	// The separator keeps the two parts apart.
	require.NotEqual(t, renderHash("a", "bc"), renderHash("ab", "c"))
	require.NotEmpty(t, a)
}
