package embedder_test

import (
	"context"
	"fmt"

	"github.com/ragsync/ragsync/embedder"
)

func ExampleNew() {
	c, err := embedder.New(embedder.Config{Provider: "hashing", Dimensions: 4})
	if err != nil {
		panic(err)
	}
	vecs, err := c.Embed(context.Background(), []string{"hello world", "Hello   World"})
	if err != nil {
		panic(err)
	}
	fmt.Println(c.Model(), c.Dimensions(), len(vecs), fmt.Sprint(vecs[0]) == fmt.Sprint(vecs[1]))
	// Output: hashing-v1 4 2 true
}

func ExampleConfig_Validate() {
	err := embedder.Config{Provider: "openai"}.WithDefaults().Validate()
	fmt.Println(err)
	// Output:
	// embedder.model: required for provider openai, e.g. text-embedding-3-small
	// embedder.api_key: required for api.openai.com, set OPENAI_API_KEY and api_key: ${OPENAI_API_KEY}
	// embedder.dimensions: must be > 0, set it to the model's output size (1536 for text-embedding-3-small), got 0
}
