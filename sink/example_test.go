package sink_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/sink"
)

// Example shows the write and read path. It needs a live Postgres with
// pgvector, so it is compiled but not run (no Output comment).
func Example() {
	ctx := context.Background()
	pool, err := sink.OpenPool(ctx, "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "ragsync")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool, "ragsync", nil); err != nil {
		log.Fatal(err)
	}
	store, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write, Index: "articles", Model: "text-embedding-3-small", Dimensions: 3})
	if err != nil {
		log.Fatal(err)
	}

	// Embed only what the index does not know yet.
	known, err := store.Vectors(ctx, []string{"h1"})
	if err != nil {
		log.Fatal(err)
	}
	chunk := sink.Chunk{Position: 0, Hash: "h1", Text: "Hello, world."}
	if _, ok := known["h1"]; !ok {
		chunk.Vector = []float32{0.1, 0.2, 0.3} // from the embedder
	}
	out, err := store.Upsert(ctx, sink.Document{
		Table: "public.articles", Key: "42",
		Version:  cdc.Version{Kind: "pg", Parts: []uint64{0x16b3f40}},
		SourceTS: time.Now(), Metadata: map[string]any{"lang": "en"},
		Chunks: []sink.Chunk{chunk},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.Applied || out.Duplicate)

	hits, err := store.Search(ctx, []float32{0.1, 0.2, 0.3}, sink.Query{K: 5, Filter: map[string]any{"lang": "en"}})
	if err != nil {
		log.Fatal(err)
	}
	for _, h := range hits {
		fmt.Printf("%s #%d %.3f\n", h.DocID, h.Position, h.Score)
	}
}
