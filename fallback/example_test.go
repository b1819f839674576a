package fallback_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ragsync/ragsync/fallback"
	"github.com/redis/go-redis/v9"
)

// A client sends a query to the front door and prints where the answer came
// from. (Needs a running front door; compiled, not run.)
func ExampleClient_Search() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res, err := fallback.NewClient(rdb, "ragsync").Search(ctx, fallback.Query{
		Text: "how do I rotate an API key", K: 5, Tenant: "acme",
	})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println(res.Status, res.Source, len(res.Hits))
}
