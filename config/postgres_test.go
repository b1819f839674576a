package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/config"
)

func TestPostgresSourceConfig(t *testing.T) {
	path := writeFile(t, `
source:
  kind: postgres
  postgres:
    url: postgres://app@db:5432/app
    slot: docs
    initial_load: false
    status_interval: 5s
    max_buffer_bytes: 8388608
tables:
  - match: public.articles
    id: [slug]
    text: "# {{title}}\n\n{{body}}"
`)
	t.Setenv("RAGSYNC_SOURCE_POSTGRES_MAX_RETAINED_WAL_BYTES", "-1")
	cfg, err := config.Load(path, []string{"source.postgres.batch_size=64"})
	require.NoError(t, err)
	require.NoError(t, cfg.Validate(true))
	pc := cfg.PostgresSourceConfig(nil, nil, nil)
	require.Equal(t, "postgres://app@db:5432/app", pc.URL)
	require.Equal(t, "docs", pc.Slot)
	require.False(t, pc.InitialLoad)
	require.Equal(t, 5*time.Second, pc.StatusInterval)
	require.Equal(t, 64, pc.BatchSize)
	require.Zero(t, pc.MaxRetainedWALBytes, "-1 disables the warning")
	require.Equal(t, []cdc.TableConfig{{Match: "public.articles", ID: []string{"slug"}}}, pc.Tables, "the publication is created for tables[].match, ids by tables[].id")
	require.Equal(t, []string{"title", "body"}, pc.TextColumns["public.articles"])
	require.Equal(t, 8<<20, pc.MaxBufferBytes)

	cfg.Source.Postgres.InitialLoad = nil
	cfg.Source.Postgres.MaxRetainedWALBytes = 0
	pc = cfg.PostgresSourceConfig(nil, nil, nil)
	require.True(t, pc.InitialLoad, "loads by default")
	require.Equal(t, int64(1<<30), pc.MaxRetainedWALBytes, "warns past 1 GiB by default")
}

func TestPostgresSourceConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		set  []string
		want []string
	}{
		{"no url", nil, []string{"source.postgres.url: set the URL"}},
		{"bad names", []string{"source.postgres.url=postgres://x/y", "source.postgres.slot=My-Slot", "source.postgres.publication=a'b"},
			[]string{"source.postgres.slot: \"My-Slot\"", "source.postgres.publication: \"a'b\""}},
		{"bad numbers", []string{"source.postgres.url=postgres://x/y", "source.postgres.max_retained_wal_bytes=-5", "source.postgres.batch_size=-1", "source.postgres.status_interval=10m", "source.postgres.max_buffer_bytes=1000"},
			[]string{"max_retained_wal_bytes", "batch_size", "status_interval", "source.postgres.max_buffer_bytes: 1000 must be at least 1048576"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Load("", append([]string{"source.kind=postgres"}, tc.set...))
			require.NoError(t, err)
			err = cfg.Validate(true)
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}
