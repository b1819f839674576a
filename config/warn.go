package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/ragsync/ragsync/embedder"
)

// warnings are settings that are accepted but do nothing, printed when the
// configuration is loaded so the user learns why.
func (c Config) Warnings() []string {
	var ws []string
	if c.Embedder.Provider == embedder.ProviderHashing && c.Embedder.Model != "" && c.Embedder.Model != embedder.HashingModel {
		ws = append(ws, fmt.Sprintf("embedder.model: %q is ignored with provider hashing, which has one model (%s); remove it, or set provider: openai to use it",
			c.Embedder.Model, embedder.HashingModel))
	}
	return ws
}

// checkEventsFile reports a file source's events file that cannot be read,
// at start-up, before anything connects to Postgres.
func checkEventsFile(path string) error {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("source.file.path: %s does not exist; set it to the JSON Lines file of Debezium messages to replay", path)
	case err != nil:
		return fmt.Errorf("source.file.path: %w", err)
	case st.IsDir():
		return fmt.Errorf("source.file.path: %s is a directory; set it to a JSON Lines file", path)
	}
	return nil
}
