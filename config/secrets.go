package config

import "github.com/ragsync/ragsync/internal/redact"

// secrets lists the configured secret values, for the redactor: printed
// errors and logs show none of them, even where a library quotes one
// outside a URL (a password split at a raw '@' into a host name).
func (c Config) Secrets() []string {
	out := []string{c.Embedder.APIKey, c.Source.Kafka.Registry.Password, c.Source.Kafka.Registry.BearerToken}
	for _, dsn := range []string{c.Postgres.URL, c.Source.Postgres.URL, c.Source.RedisStreams.URL, c.FrontDoor.RedisURL, c.Embedder.Budget.RedisURL} {
		out = append(out, redact.Password(dsn))
	}
	return out
}
