// Package kafka is the Kafka transport of changes: a consumer-group Source
// of Debezium topics that commits a partition's offset only past records
// the pipeline applied, its consumer-lag metric, and the dead-letter topic
// (DeadLetters writes it; DeadLetterTopic lists, replays and purges it).
//
// It hands over cdc.Record values, decoded with a cdc.Decoder when one is
// configured; it knows nothing of chunks, vectors or the index.
package kafka
