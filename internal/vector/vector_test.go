package vector

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestUnsearchable(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, tc := range []struct {
		name string
		v    []float32
		want string
	}{
		{"fine", []float32{0, 1, 0}, ""},
		{"negative", []float32{-1, 0}, ""},
		{"zero", []float32{0, 0, 0}, "zero vector"},
		{"empty", nil, "zero vector"},
		{"nan", []float32{1, nan}, "NaN or Inf"},
		{"inf", []float32{inf, 0}, "NaN or Inf"},
		{"nan beside zeros", []float32{0, nan, 0}, "NaN or Inf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Unsearchable(tc.v)
			if tc.want == "" {
				require.Empty(t, got)
				return
			}
			require.Contains(t, got, tc.want)
		})
	}
}
