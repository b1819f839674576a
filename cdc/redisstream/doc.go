// Package redisstream is the Redis Streams transport of changes: a Source
// that reads the streams Debezium Server's Redis sink
// (debezium.sink.type=redis) writes, one per table, in a consumer group, and
// acknowledges (XACK) exactly the entries of a batch once the pipeline
// applied them; its lag collector (XINFO GROUPS); and the dead-letter
// streams "<stream>.ragsync-dlq" (DeadLetters writes them; DeadLetterStream
// lists, replays and purges them).
//
// Debezium Server writes an entry in one of two shapes
// (debezium.sink.redis.message.format): "compact", the default, one field
// whose name is the record's key and whose value is the record's value;
// "extended", the fields "key" and "value" and one field per header, its
// name upper-cased. A null key or value is written as the literal
// debezium.sink.redis.null.key / null.value ("default" for both). The
// Source reads both shapes, by the fields an entry has, and hands the key
// and value over as the bytes Debezium wrote, so a dead letter keeps them.
//
// It hands over cdc.Record values, decoded with a cdc.Decoder; it knows
// nothing of chunks, vectors or the index. It never creates or trims the
// streams it reads: they are Debezium Server's.
package redisstream
