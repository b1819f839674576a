package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/config"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/monitor"
)

func TestPurgeAndDupesCommands(t *testing.T) {
	_, schema := pgtest.Schema(t)
	base := []string{"--postgres-url", pgtest.URL(), "--set", "postgres.schema=" + schema, "--index", "cli"}

	out, err := runCLI(t, "", append([]string{"purge", "--json"}, base...)...)
	require.NoError(t, err, out)
	var res map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Equal(t, map[string]any{"documents": 0.0, "chunks": 0.0, "cache_entries": 0.0,
		"document_retention": "720h0m0s", "cache_retention": "2160h0m0s"}, res)

	out, err = runCLI(t, "", append([]string{"purge", "--older-than", "1h"}, base...)...)
	require.NoError(t, err)
	require.Equal(t, "purged 0 documents (0 chunks) and 0 cache entries from index cli (documents deleted more than 1h0m0s ago, cache entries unused for 2160h0m0s)\n", out)

	out, err = runCLI(t, "", append([]string{"dupes"}, base...)...)
	require.NoError(t, err)
	require.Equal(t, "no document pairs at or above 80\n", out)

	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"negative retention", []string{"purge", "--older-than", "-1h"}, "must not be negative"},
		{"negative retention in config", []string{"purge", "--set", "purge.cache_retention=-1h"}, "purge.cache_retention"},
		{"score above 100", []string{"dupes", "--min-score", "101"}, "--min-score 101"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runCLI(t, "", append(tc.args, base...)...)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestReuseConfig(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	b := func(v bool) *bool { return &v }
	tests := []struct {
		name         string
		cfg          config.ReuseConfig
		wantDisabled bool
		wantMin      float64
		wantErr      string
	}{
		{"absent is the default", config.ReuseConfig{}, false, 0, ""},
		{"enabled false", config.ReuseConfig{Enabled: b(false), MinSimilarity: f(0.9)}, true, 0.9, ""},
		{"min similarity 0 disables", config.ReuseConfig{MinSimilarity: f(0)}, true, 0, ""},
		{"tuned", config.ReuseConfig{MinSimilarity: f(0.95), Method: "shingle"}, false, 0.95, ""},
		{"above 1", config.ReuseConfig{MinSimilarity: f(1.2)}, false, 1.2, "reuse.min_similarity"},
		{"bad method", config.ReuseConfig{Method: "ssdeep"}, false, 0, "reuse.method"},
		{"bad new-words policy", config.ReuseConfig{NewWords: "later"}, false, 0, "reuse.new_words"},
		{"window too short", config.ReuseConfig{RepayWindow: time.Millisecond}, false, 0, "reuse.repay_window"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.cfg.Pipeline(monitor.Config{CosineBound: 0.07}, nil)
			require.Equal(t, tc.wantDisabled, p.Disabled)
			require.Equal(t, 0.07, p.Bound, "reuse's bound is the monitor's setting")
			require.Equal(t, tc.wantMin, p.MinSimilarity)
			err := tc.cfg.Validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}
