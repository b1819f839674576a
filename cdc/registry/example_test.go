package registry_test

import (
	"fmt"

	"github.com/ragsync/ragsync/cdc/registry"
)

// New reports every configuration problem at once, each naming its setting
// and the fix.
func ExampleNew() {
	_, err := registry.New(registry.Config{BearerToken: "token", Username: "key", CertFile: "client.pem"})
	fmt.Println(err)
	// Output:
	// source.kafka.registry.url: required, set it to the registry's base URL (https://host:8081)
	// source.kafka.registry.bearer_token: set either it or username and password, not both
	// source.kafka.registry.cert_file, key_file: set both (a client certificate and its key) or neither
}
