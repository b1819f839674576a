// Package registry decodes Kafka records framed by a Confluent-compatible
// schema registry (Avro today; the compile step dispatches on the schema
// type) into what Kafka Connect's JsonConverter gives for the same record,
// so that cdc's one Debezium reader decodes every format alike. It fetches
// each schema id once and keeps it, and it tells a registry that cannot be
// reached (transient, cdc.ErrRegistryUnavailable) from bytes no schema can
// decode (permanent, naming the schema id and subject).
//
// It must not interpret Debezium's envelope or logical types: it hands
// Connect schemas and values to cdc, which does.
package registry
