package embedder

import (
	"context"
	"fmt"
)

// Client is what New returns: either an *OpenAI or a *Hashing. Consumers
// declare their own, smaller interfaces (the pipeline's Embedder needs only
// Embed).
type Client interface {
	// Embed returns one vector per text, in input order, each of
	// Dimensions() entries. An empty input returns an empty result without
	// any request.
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	// EmbedCounted is Embed given the cl100k_base count of every text
	// (tokens[i] counts texts[i]), which the client trusts instead of
	// counting again; nil tokens means count them.
	EmbedCounted(ctx context.Context, texts []string, tokens []int) ([][]float32, error)
	// Model names the model the vectors come from; with Dimensions it
	// identifies which stored vectors are comparable.
	Model() string
	// Dimensions is the length of every returned vector.
	Dimensions() int
	// ReportedModel is the model name the provider gave in its last
	// successful answer ("" before the first one; the offline embedder
	// reports its own versioned name): the monitor shows it when a
	// provider serves another model behind the configured name, and chunk
	// rows record it.
	ReportedModel() string
}

var (
	_ Client = (*OpenAI)(nil)
	_ Client = (*Hashing)(nil)
)

// New returns the Client that cfg.Provider names, after applying defaults;
// the error lists every invalid field. With cfg.Registerer set, a remote
// client's request metrics are registered there (the offline embedder has
// none).
func New(cfg Config) (Client, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("embedder config: %w", err)
	}
	if cfg.Provider == ProviderHashing {
		return NewHashing(cfg.Dimensions), nil
	}
	o, err := NewOpenAI(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Registerer != nil {
		if err := RegisterMetrics(cfg.Registerer, o); err != nil {
			return nil, err
		}
	}
	return o, nil
}
