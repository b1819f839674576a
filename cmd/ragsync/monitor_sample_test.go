package main

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMonitorSampleExplainsShortfall: monitor --sample 32 on an index of 5
// chunks, none with a reused vector, measures 5 and says why the other 27
// were not: every chunk it did not measure has its reason, in the text and
// in --json.
func TestMonitorSampleExplainsShortfall(t *testing.T) {
	var texts []string
	for i := range 5 {
		texts = append(texts, fmt.Sprintf("note %d on tide pools and anemones", i))
	}
	_, base := monitorIndex(t, texts)

	out, err := runCLI(t, "", append([]string{"monitor", "--sample", "32"}, base...)...)
	require.NoError(t, err, out)
	t.Log(out)
	require.Contains(t, out, "stored-vector sample: 32 asked, 5 measured: ")
	require.Contains(t, out, "not drawn: the index has fewer chunks with reused vectors than the sample's reused share")

	out, err = runCLI(t, "", append([]string{"monitor", "--sample", "32", "--json"}, base...)...)
	require.NoError(t, err, out)
	var status struct {
		Sample struct {
			Asked      int `json:"asked"`
			Measured   int `json:"measured"`
			FewReused  int `json:"few_reused"`
			FewCached  int `json:"few_cached"`
			FewUniform int `json:"few_uniform"`
			OverBudget int `json:"over_budget"`
		} `json:"sample"`
	}
	lastJSON(t, out, &status)
	s := status.Sample
	require.Equal(t, 32, s.Asked)
	require.Equal(t, 5, s.Measured)
	require.Equal(t, s.Asked-s.Measured, s.FewReused+s.FewCached+s.FewUniform+s.OverBudget, "every chunk not measured has its reason: %+v", s)
	require.Positive(t, s.FewReused, "no chunk has a reused vector")
}
