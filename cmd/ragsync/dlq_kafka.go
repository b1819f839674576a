package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// kafkaDLQ works on the CDC dead-letter topic.
func kafkaDLQ(_ *cobra.Command, _ Config, _ *dlqFlags, _ string) error {
	return errors.New("dlq: the CDC dead-letter topic commands are not wired yet; read it with kcat -C -t <topic>.ragsync-dlq, or use --frontdoor")
}
