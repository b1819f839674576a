package backfill

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Signal is a Debezium signal: an ad hoc incremental snapshot
// ("execute-snapshot") or its cancellation ("stop-snapshot"), as the
// connector reads it from its signal table (signal.data.collection) or its
// Kafka signal topic (signal.kafka.topic). See Debezium's "Sending signals
// to a Debezium connector".
type Signal struct {
	ID   string
	Type string
	Data map[string]any
}

// ExecuteSnapshot asks for an incremental snapshot of tables ("schema.table",
// Debezium's data-collection names for PostgreSQL), each filtered by where
// when it is not empty.
func ExecuteSnapshot(tables []string, where string) Signal {
	data := map[string]any{"data-collections": tables, "type": "incremental"}
	if where != "" {
		var conds []map[string]string
		for _, t := range tables {
			conds = append(conds, map[string]string{"data-collection": t, "filter": where})
		}
		data["additional-conditions"] = conds
	}
	return Signal{ID: newSignalID(), Type: "execute-snapshot", Data: data}
}

// StopSnapshot cancels the incremental snapshot of tables.
func StopSnapshot(tables []string) Signal {
	return Signal{ID: newSignalID(), Type: "stop-snapshot", Data: map[string]any{"data-collections": tables, "type": "incremental"}}
}

func newSignalID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "ragsync-" + hex.EncodeToString(b[:])
}

// execer is a pgx connection, pool or transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Insert writes s into the connector's signal table (id, type, data — the
// column names are Debezium's recommended ones; it only needs the order).
func (s Signal) Insert(ctx context.Context, db execer, table string) error {
	schema, name, ok := strings.Cut(table, ".")
	if !ok || schema == "" || name == "" {
		return fmt.Errorf("--signal-table %q: want schema.table, the connector's signal.data.collection", table)
	}
	data, err := json.Marshal(s.Data)
	if err != nil {
		return err
	}
	_, err = db.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, name}.Sanitize()+" VALUES ($1, $2, $3)", s.ID, s.Type, string(data))
	if err != nil {
		return fmt.Errorf("send %s signal through %s: %w (create it as in docs/debezium.md and list it in signal.data.collection)", s.Type, table, err)
	}
	return nil
}

// KafkaValue is s as a Kafka signal topic record value; the record's key
// must be the connector's topic.prefix.
func (s Signal) KafkaValue() []byte {
	b, _ := json.Marshal(map[string]any{"type": s.Type, "data": s.Data}) // maps of strings: cannot fail
	return b
}
