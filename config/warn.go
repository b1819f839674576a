package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
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
	if e := c.Embedder; e.Provider == embedder.ProviderOpenAI && e.APIKey == "" && e.APIKeyUnset != "" && !e.WithDefaults().NeedsKey() {
		ws = append(ws, fmt.Sprintf("embedder.api_key: ${%s} is not set, so no key is sent to %s; fine for a server that takes none, otherwise export %s (write api_key: \"\" to say none is needed)",
			e.APIKeyUnset, hostOf(e.BaseURL), e.APIKeyUnset))
	}
	if f := c.Freshness; f.Target > 0 && f.DegradedAfter > 0 && f.DegradedAfter < f.Target {
		ws = append(ws, fmt.Sprintf("freshness.degraded_after: %s is under freshness.target (%s), so /readyz reports degraded while the target still holds; raise it (unset: 3 × the target)",
			f.DegradedAfter, f.Target))
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

// hostOf is the host of a URL, without the user and password it may carry.
func hostOf(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		return u.Host
	}
	return "embedder.base_url"
}
