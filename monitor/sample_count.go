package monitor

import (
	"fmt"
	"strings"
)

// SampleCount says how many stored chunks a check asked to re-embed, how
// many it measured, and why the others were not: the sample is drawn from
// what the index holds, which can be less than was asked for.
type SampleCount struct {
	// Asked is the sample size (monitor.sample_size or --sample).
	Asked int `json:"asked"`
	// Measured is the chunks re-embedded and compared.
	Measured int `json:"measured"`
	// FewReused is the reused picks not made: the index holds fewer chunks
	// with a reused vector than the share of the sample kept for them.
	FewReused int `json:"few_reused"`
	// FewCached is the picks among the oldest cache entries not made: fewer
	// of the index's chunks carry such a vector.
	FewCached int `json:"few_cached"`
	// FewUniform is the uniform picks not made: their random position
	// landed on a chunk already picked, or the index has fewer chunks than
	// asked.
	FewUniform int `json:"few_uniform"`
	// OverBudget is the picks left unmeasured because
	// monitor.max_tokens_per_hour was spent.
	OverBudget int `json:"over_budget"`
}

// String is "32 asked, 18 measured: …" with each reason for a shortfall.
func (c SampleCount) String() string {
	s := fmt.Sprintf("stored-vector sample: %d asked, %d measured", c.Asked, c.Measured)
	var why []string
	if c.FewReused > 0 {
		why = append(why, fmt.Sprintf("%d not drawn: the index has fewer chunks with reused vectors than the sample's reused share", c.FewReused))
	}
	if c.FewCached > 0 {
		why = append(why, fmt.Sprintf("%d not drawn: fewer chunks carry the oldest cached vectors than the sample's cached share", c.FewCached))
	}
	if c.FewUniform > 0 {
		why = append(why, fmt.Sprintf("%d uniform picks landed on chunks already picked (or the index has fewer chunks)", c.FewUniform))
	}
	if c.OverBudget > 0 {
		why = append(why, fmt.Sprintf("%d left unmeasured: monitor.max_tokens_per_hour is spent", c.OverBudget))
	}
	if len(why) > 0 {
		s += ": " + strings.Join(why, "; ")
	}
	return s
}
