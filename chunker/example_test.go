package chunker_test

import (
	"fmt"

	"github.com/ragsync/ragsync/chunker"
)

func ExampleChunker_Split() {
	c, err := chunker.New(chunker.Config{Strategy: "greedy", MinTokens: 4, TargetTokens: 16, MaxTokens: 32})
	if err != nil {
		panic(err)
	}
	doc := "# Install\n\nRun the installer and follow the prompts.\n\n# Configure\n\nEdit ragsync.yaml to point at your database."
	for _, ch := range c.Split(doc) {
		fmt.Printf("%d %2d tokens %s… %q\n", ch.Position, ch.Tokens, ch.Hash[:8], ch.Text)
	}
	// Output:
	// 0 11 tokens 35668927… "# Install\n\nRun the installer and follow the prompts."
	// 1 14 tokens 65a2280b… "# Configure\n\nEdit ragsync.yaml to point at your database."
}

func ExampleHash() {
	// Layout and Unicode composition do not change the hash.
	fmt.Println(chunker.Hash("caf\u00e9  au lait\n") == chunker.Hash(" cafe\u0301 au\tlait"))
	// Output: true
}
