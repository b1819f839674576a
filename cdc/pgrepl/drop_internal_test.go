package pgrepl

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStartedPublications(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		want        []string
		ok          bool
	}{
		{"ragsync", `START_REPLICATION SLOT "s" LOGICAL 0/1A2B (proto_version '2', publication_names 'ragsync_x')`, []string{"ragsync_x"}, true},
		{"quoted list", `START_REPLICATION SLOT "s" LOGICAL 0/0 (proto_version '1', publication_names '"a","B c"')`, []string{"a", "B c"}, true},
		{"quoted key, unquoted folds", `START_REPLICATION SLOT s LOGICAL 0/0 ("proto_version" '1', "publication_names" 'Pub, other')`, []string{"pub", "other"}, true},
		{"not started", `IDENTIFY_SYSTEM`, nil, false},
		{"hidden", `<insufficient privilege>`, nil, false},
		{"sql function", `SELECT * FROM pg_logical_slot_peek_binary_changes('s', NULL, NULL, 'publication_names', 'p')`, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := startedPublications(tc.query)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestDefaultName(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
	a, b := DefaultName("a_b", "c"), DefaultName("a", "b_c")
	require.NotEqual(t, a, b)
	require.Regexp(t, `^ragsync_a_b_c_[0-9a-f]{6}$`, a)
	long := DefaultName("s234567890123456789012345678901234567890", "i234567890123456789012345678901234567890")
	require.Regexp(t, valid, long)
	require.Len(t, long, 63)
	require.Equal(t, DefaultName("ragsync", "docs"), DefaultName("ragsync", "docs"), "stable")
}
