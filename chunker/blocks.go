package chunker

import "strings"

// blockKind tells the packers and the oversize splitter how a block may be
// treated: headings open chunks, code splits at lines rather than sentences.
type blockKind uint8

const (
	kindText blockKind = iota
	kindHeading
	kindCode
	kindListItem
	// kindTable is a paragraph whose every line is a pipe table row. blocks
	// never returns it: the oversize splitter sets it, to cut such a block
	// at its rows rather than at sentence ends.
	kindTable
)

// span is a byte range [start, end) of the input.
type span struct {
	start, end int
	kind       blockKind
}

// line is one input line; end excludes the line break.
type line struct{ start, end int }

func splitLines(text string) []line {
	var lines []line
	start := 0
	for start <= len(text) {
		i := strings.IndexByte(text[start:], '\n')
		if i < 0 {
			if start < len(text) {
				lines = append(lines, line{start, len(text)})
			}
			break
		}
		lines = append(lines, line{start, start + i})
		start += i + 1
	}
	return lines
}

// blocks splits Markdown (or plain text, which is Markdown without markup)
// into structural blocks: ATX and setext headings, fenced code blocks, list
// items, thematic breaks and blank-line-separated paragraphs. It follows
// CommonMark only as far as boundaries need; inline syntax is irrelevant.
// Every returned span is trimmed of surrounding whitespace and non-empty.
func blocks(text string) []span {
	lines := splitLines(text)
	var out []span
	emit := func(s span) {
		s.start, s.end = trimSpan(text, s.start, s.end)
		if s.start < s.end {
			out = append(out, s)
		}
	}
	open := -1 // first line of the open paragraph or list item, -1 if none
	openKind := kindText
	closeOpen := func(last int) {
		if open >= 0 {
			emit(span{lines[open].start, lines[last].end, openKind})
			open = -1
		}
	}
	for i := 0; i < len(lines); i++ {
		l := text[lines[i].start:lines[i].end]
		switch {
		case isBlank(l):
			closeOpen(i - 1)
		case isFence(l) != "":
			closeOpen(i - 1)
			fence := isFence(l)
			j := i + 1
			for j < len(lines) && !closesFence(text[lines[j].start:lines[j].end], fence) {
				j++
			}
			if j == len(lines) {
				j-- // unclosed fence runs to the end, as in CommonMark
			}
			emit(span{lines[i].start, lines[j].end, kindCode})
			i = j
		case isATXHeading(l):
			closeOpen(i - 1)
			emit(span{lines[i].start, lines[i].end, kindHeading})
		case open >= 0 && openKind == kindText && isSetextUnderline(l):
			emit(span{lines[open].start, lines[i].end, kindHeading})
			open = -1
		case isThematicBreak(l):
			closeOpen(i - 1)
			emit(span{lines[i].start, lines[i].end, kindText})
		case isListItem(l):
			closeOpen(i - 1)
			open, openKind = i, kindListItem
		case open < 0:
			open, openKind = i, kindText
		}
	}
	closeOpen(len(lines) - 1)
	return out
}

func isSpace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\r' || b == '\n' || b == '\v' || b == '\f'
}

func isBlank(l string) bool {
	return strings.TrimSpace(l) == ""
}

// indent strips up to three leading spaces; four make an indented code line
// in CommonMark, which we treat as paragraph text.
func indent(l string) (string, bool) {
	n := 0
	for n < len(l) && l[n] == ' ' {
		n++
	}
	if n > 3 {
		return l, false
	}
	return l[n:], true
}

// isFence returns the fence marker (``` or ~~~, possibly longer) that opens a
// fenced code block on l, or "".
func isFence(l string) string {
	s, ok := indent(l)
	if !ok || len(s) < 3 || (s[0] != '`' && s[0] != '~') {
		return ""
	}
	n := 0
	for n < len(s) && s[n] == s[0] {
		n++
	}
	if n < 3 || (s[0] == '`' && strings.IndexByte(s[n:], '`') >= 0) {
		return ""
	}
	return s[:n]
}

func closesFence(l, fence string) bool {
	s, ok := indent(l)
	if !ok || !strings.HasPrefix(s, fence) {
		return false
	}
	rest := strings.TrimLeft(s, fence[:1])
	return isBlank(rest)
}

func isATXHeading(l string) bool {
	s, ok := indent(l)
	if !ok {
		return false
	}
	n := 0
	for n < len(s) && s[n] == '#' {
		n++
	}
	return n >= 1 && n <= 6 && (n == len(s) || s[n] == ' ' || s[n] == '\t' || s[n] == '\r')
}

func isSetextUnderline(l string) bool {
	s, ok := indent(l)
	if !ok {
		return false
	}
	s = strings.TrimRight(s, " \t\r")
	if s == "" || (s[0] != '=' && s[0] != '-') {
		return false
	}
	return strings.Trim(s, s[:1]) == ""
}

func isThematicBreak(l string) bool {
	s, ok := indent(l)
	if !ok || s == "" || (s[0] != '-' && s[0] != '*' && s[0] != '_') {
		return false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == s[0]:
			n++
		case s[i] == ' ' || s[i] == '\t' || s[i] == '\r':
		default:
			return false
		}
	}
	return n >= 3
}

// isListItem reports whether l starts a bullet or ordered list item. Any
// indentation is accepted so that nested items become blocks of their own.
func isListItem(l string) bool {
	s := strings.TrimLeft(l, " \t")
	if s == "" {
		return false
	}
	if s[0] == '-' || s[0] == '*' || s[0] == '+' {
		return len(s) == 1 || s[1] == ' ' || s[1] == '\t'
	}
	n := 0
	for n < len(s) && n < 9 && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	if n == 0 || n == len(s) || (s[n] != '.' && s[n] != ')') {
		return false
	}
	return n+1 == len(s) || s[n+1] == ' ' || s[n+1] == '\t'
}

// isTable reports a block of two or more lines that each start, after up
// to three spaces of indentation, with a pipe: a GitHub-flavoured Markdown
// table, whose rows are its natural pieces.
func isTable(block string) bool {
	n := 0
	for _, l := range strings.Split(block, "\n") {
		l, ok := indent(l)
		if !ok || !strings.HasPrefix(l, "|") {
			return false
		}
		n++
	}
	return n >= 2
}
