package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/config"
)

func TestFreshnessSettings(t *testing.T) {
	tests := []struct {
		name         string
		file         string
		env          map[string]string
		sets         []string
		wantTarget   time.Duration
		wantDegraded time.Duration
		wantErr      []string
		wantWarning  string
	}{
		{name: "unset: no target, never degraded"},
		{name: "a target alone: degraded after three times it", file: "freshness:\n  target: 2s\n",
			wantTarget: 2 * time.Second, wantDegraded: 6 * time.Second},
		{name: "degraded_after given wins", file: "freshness:\n  target: 2s\n  degraded_after: 1m\n",
			wantTarget: 2 * time.Second, wantDegraded: time.Minute},
		{name: "degraded_after without a target", file: "freshness:\n  degraded_after: 30s\n", wantDegraded: 30 * time.Second},
		{name: "from the environment", env: map[string]string{"RAGSYNC_FRESHNESS_TARGET": "500ms", "RAGSYNC_FRESHNESS_DEGRADED_AFTER": "10s"},
			wantTarget: 500 * time.Millisecond, wantDegraded: 10 * time.Second},
		{name: "from --set", sets: []string{"freshness.target=3s"}, wantTarget: 3 * time.Second, wantDegraded: 9 * time.Second},
		{name: "negative target", file: "freshness:\n  target: -2s\n",
			wantErr: []string{"freshness.target: -2s must not be negative", "e.g. 2s"}},
		{name: "negative degraded_after", file: "freshness:\n  degraded_after: -1m\n",
			wantErr: []string{"freshness.degraded_after: -1m0s must not be negative", "e.g. 1m"}},
		{name: "degraded before the target is missed: a warning", file: "freshness:\n  target: 10s\n  degraded_after: 5s\n",
			wantTarget: 10 * time.Second, wantDegraded: 5 * time.Second, wantWarning: "freshness.degraded_after: 5s is under freshness.target (10s)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			cfg, err := config.Load(writeFile(t, tc.file), tc.sets)
			require.NoError(t, err)
			err = cfg.Validate(false)
			if len(tc.wantErr) > 0 {
				require.Error(t, err)
				for _, w := range tc.wantErr {
					require.ErrorContains(t, err, w)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantTarget, cfg.Freshness.Target)
			require.Equal(t, tc.wantDegraded, cfg.Freshness.Degraded())
			if tc.wantWarning == "" {
				require.Empty(t, cfg.Warnings())
			} else {
				require.Len(t, cfg.Warnings(), 1)
				require.Contains(t, cfg.Warnings()[0], tc.wantWarning)
			}
		})
	}
}
