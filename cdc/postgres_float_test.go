package cdc

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDebeziumDoublesReadAsPostgresWritesThem: a double or float in a
// Debezium event (Jackson's 20.0, 1.0E20) decodes to the text Postgres
// writes for the same value with extra_float_digits=1, which is what the
// Postgres source and backfill read; the wants are Postgres 15's output.
func TestDebeziumDoublesReadAsPostgresWritesThem(t *testing.T) {
	for _, tc := range []struct {
		in, typ, want string
	}{
		{"20.0", "float64", "20"},
		{"1.0E20", "float64", "1e+20"},
		{"1.0E15", "float64", "1e+15"},
		{"1.0E14", "float64", "100000000000000"},
		{"1.0E-4", "float64", "0.0001"},
		{"1.0E-5", "float64", "1e-05"},
		{"1.5E-5", "float64", "1.5e-05"},
		{"1.234567890123456E14", "float64", "123456789012345.6"},
		{"-0.0", "float64", "-0"},
		{"1.0E100", "float64", "1e+100"},
		{"2.5E-300", "float64", "2.5e-300"},
		{"1.5", "float64", "1.5"},
		{"1000000.0", "float32", "1e+06"},
		{"100000.0", "float32", "100000"},
		{"0.1", "float32", "0.1"},
		{"20.0", "double", "20"},
		{"1000000.0", "float", "1e+06"},
	} {
		t.Run(tc.in+"/"+tc.typ, func(t *testing.T) {
			got, err := convertValue(json.Number(tc.in), map[string]any{"type": tc.typ}, 0)
			require.NoError(t, err)
			require.Equal(t, json.Number(tc.want), got)
		})
	}
	got, err := convertValue("NaN", map[string]any{"type": "float64"}, 0)
	require.NoError(t, err)
	require.Equal(t, "NaN", got, "NaN stays the string Jackson wrote")
}
