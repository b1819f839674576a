package suggest

import "testing"

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"articles", "articles", 0}, {"articels", "articles", 2}, {"articl", "articles", 2},
		{"", "abc", 3}, {"abc", "", 3}, {"kitten", "sitting", 3}, {"max_batch_inputs", "max_batch_input", 1},
	} {
		if got := Distance(tc.a, tc.b); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := Distance(tc.b, tc.a); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d (symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestNearest(t *testing.T) {
	known := []string{"articles", "articles_v2", "notes", "embedder_api_key", "embedder_model"}
	for _, tc := range []struct {
		name, want string
	}{
		{"articels", "articles"}, {"articles", "articles"}, {"note", "notes"}, {"zzzzzz", ""},
		{"embeder_api_key", "embedder_api_key"}, {"embedder_modle", "embedder_model"}, {"", ""},
	} {
		if got := Nearest(tc.name, known); got != tc.want {
			t.Errorf("Nearest(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
	// Equally near candidates: the first in byte order, whatever their order.
	if got := Nearest("ab", []string{"ad", "ac"}); got != "ac" {
		t.Errorf("tie: got %q, want ac", got)
	}
}
