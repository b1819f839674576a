// Package file is the JSON Lines transport of changes: a Source that
// replays (or follows) a file of Debezium messages, one a line, in any of
// the shapes ParseLine reads (a bare value, a key/value wrapper, kcat's -J
// envelope), and the dead-letter file (DeadLetters writes it in kcat's -J
// shape, which the Source reads back; DeadLetterFile lists, replays and
// purges it).
//
// It hands over cdc.Record values, decoded with a cdc.Decoder when one is
// configured; it knows nothing of chunks, vectors or the index.
package file
