package config

import (
	"errors"
	"fmt"

	"github.com/ragsync/ragsync/backfill"
	"github.com/ragsync/ragsync/cdc"
)

// BackfillConfig is the backfill section of ragsync.yaml.
type BackfillConfig struct {
	// SourceURL is the document database a backfill reads. Defaults to
	// source.postgres.url.
	SourceURL string `yaml:"source_url"`
	// PageRows is how many rows one page (one checkpoint) holds. Defaults
	// to 500.
	PageRows int `yaml:"page_rows"`
	// Rate caps rows read per second; 0 means no cap. Defaults to 0.
	Rate float64 `yaml:"rate"`
	// PricePerMillionTokens is the embedding price --dry-run quotes its
	// cost with, in your currency per million tokens. Defaults to 0 (no
	// cost printed).
	PricePerMillionTokens float64 `yaml:"price_per_million_tokens"`
	// BatchPricePerMillionTokens is the price --dry-run quotes for the
	// batch lane (embedder.batch), per million tokens. Defaults to half of
	// price_per_million_tokens (OpenAI's Batch API discount).
	BatchPricePerMillionTokens float64 `yaml:"batch_price_per_million_tokens"`
}

// BatchPrice is BatchPricePerMillionTokens, or by default half of
// PricePerMillionTokens.
func (c BackfillConfig) BatchPrice() float64 {
	if c.BatchPricePerMillionTokens > 0 {
		return c.BatchPricePerMillionTokens
	}
	return c.PricePerMillionTokens / 2
}

// backfillConfig builds the backfill source's config: the tables named on
// the command line, else every tables[].match that names one table.
func (c Config) BackfillSource(tables []string, where string, resume, needURL bool) (backfill.Config, error) {
	bc := backfill.Config{
		URL:      c.Backfill.SourceURL,
		PageRows: c.Backfill.PageRows,
		Rate:     c.Backfill.Rate,
		Resume:   resume,
	}
	if bc.URL == "" {
		bc.URL = c.Source.Postgres.URL
	}
	// When serve applies a Debezium connector's events of the same
	// database, the backfill's rows take the connector's identity, so
	// positions of the one database order against each other and the
	// reconcile covers the documents the connector wrote.
	bc.DebeziumServer = c.sourceDebeziumServer()
	// The versions name the move epochs serve's decoder gives the same
	// source, and each table's document ids are its tables[] entry's, the
	// exact match else the first pattern that selects it, as serve keys
	// the table's changes.
	dc := c.DecoderConfig()
	bc.Moves = dc.Moves
	if len(tables) == 0 {
		for _, t := range c.Tables {
			if !isPattern(t.Match) {
				tables = append(tables, t.Match)
			}
		}
	}
	for _, name := range tables {
		t, _ := cdc.LookupTable(dc.Tables, name)
		bc.Tables = append(bc.Tables, backfill.Table{Name: name, ID: t.ID, Where: where})
	}
	var errs []error
	check := bc
	if !needURL && check.URL == "" {
		check.URL = "unused" // a Kafka signal needs no document database
	}
	if err := check.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Backfill.PricePerMillionTokens < 0 {
		errs = append(errs, fmt.Errorf("backfill.price_per_million_tokens: %v must be >= 0", c.Backfill.PricePerMillionTokens))
	}
	if c.Backfill.BatchPricePerMillionTokens < 0 {
		errs = append(errs, fmt.Errorf("backfill.batch_price_per_million_tokens: %v must be >= 0 (0: half of price_per_million_tokens)", c.Backfill.BatchPricePerMillionTokens))
	}
	return bc, errors.Join(errs...)
}

func isPattern(s string) bool {
	for _, r := range s {
		switch r {
		case '*', '?', '[':
			return true
		}
	}
	return false
}
