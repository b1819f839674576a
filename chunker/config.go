package chunker

import (
	"errors"
	"fmt"
)

// Strategy names accepted in Config.Strategy.
const (
	StrategyContentDefined = "content-defined"
	StrategyGreedy         = "greedy"
)

// Config is the chunker section of ragsync.yaml.
type Config struct {
	// Strategy picks where chunk boundaries go: "content-defined" cuts after
	// blocks whose content hash matches a mask, so an edit moves at most the
	// boundaries around it; "greedy" packs blocks up to TargetTokens.
	// Defaults to "content-defined".
	Strategy string `yaml:"strategy"`
	// TargetTokens is the mean chunk size aimed for, in cl100k_base tokens.
	// Defaults to 512.
	TargetTokens int `yaml:"target_tokens"`
	// MinTokens is the size below which a chunk is not cut at a heading or a
	// content-defined boundary. Defaults to 128.
	MinTokens int `yaml:"min_tokens"`
	// MaxTokens is the hard upper bound of a chunk, in tokens. Defaults to 1024.
	MaxTokens int `yaml:"max_tokens"`
	// RefineTargetTokens is the mean size of the finer content-defined
	// pieces an update cuts the chunks it changes into (see
	// Chunker.Refine); their min_tokens is a quarter of it and their
	// max_tokens four times it. 0 (the default) and -1 leave refinement
	// off; SuggestedRefineTargetTokens is the size measured.
	RefineTargetTokens int `yaml:"refine_target_tokens"`
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Strategy == "" {
		c.Strategy = StrategyContentDefined
	}
	if c.TargetTokens == 0 {
		c.TargetTokens = 512
	}
	if c.MinTokens == 0 {
		c.MinTokens = 128
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = 1024
	}
	if c.RefineTargetTokens == 0 {
		c.RefineTargetTokens = RefineOff
	}
	return c
}

// minMaxTokens keeps MaxTokens above the token count of any single rune (at
// most 4 byte-level tokens), so a hard split always makes progress.
const minMaxTokens = 8

// Validate reports every problem of c at once, each naming its yaml path and
// the fix. Call it on the result of WithDefaults.
func (c Config) Validate() error {
	var errs []error
	switch c.Strategy {
	case StrategyContentDefined, StrategyGreedy:
	default:
		errs = append(errs, fmt.Errorf("chunker.strategy: %q is not a strategy, use %q or %q",
			c.Strategy, StrategyContentDefined, StrategyGreedy))
	}
	if c.MinTokens < 1 {
		errs = append(errs, fmt.Errorf("chunker.min_tokens: must be >= 1, got %d", c.MinTokens))
	}
	if c.TargetTokens < c.MinTokens {
		errs = append(errs, fmt.Errorf("chunker.target_tokens: must be >= min_tokens (%d), got %d",
			c.MinTokens, c.TargetTokens))
	}
	if c.MaxTokens < c.TargetTokens {
		errs = append(errs, fmt.Errorf("chunker.max_tokens: must be >= target_tokens (%d), got %d",
			c.TargetTokens, c.MaxTokens))
	}
	if c.MaxTokens < minMaxTokens {
		errs = append(errs, fmt.Errorf("chunker.max_tokens: must be >= %d, got %d", minMaxTokens, c.MaxTokens))
	}
	if err := c.validateRefine(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Fingerprint names the strategy and parameters that decide where chunks
// are cut, e.g. "content-defined/512/128/1024" ("+r64" when updates refine
// changed chunks at 64 tokens). It is stable across runs and versions for
// the same settings; two equal fingerprints cut the same text into the
// same chunks. Call it on the result of WithDefaults. Each chunk row
// records it, so an index cut with several settings shows the mix.
func (c Config) Fingerprint() string {
	f := fmt.Sprintf("%s/%d/%d/%d", c.Strategy, c.TargetTokens, c.MinTokens, c.MaxTokens)
	if c.RefineTargetTokens > 0 {
		f += fmt.Sprintf("+r%d", c.RefineTargetTokens)
	}
	return f
}
