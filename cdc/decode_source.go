package cdc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Version kinds, one per connector family (see version.go).
const (
	KindPostgres  = "pg"
	KindMySQL     = "mysql"
	KindSQLServer = "sqlserver"
	KindOracle    = "oracle"
	KindMongo     = "mongo"
	KindTS        = "ts"
)

// fieldError is a source or envelope field with the wrong type or format.
type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return e.field + ": " + e.err.Error() }
func (e *fieldError) Unwrap() error { return e.err }

// connectorKind names the connector that wrote src: from source.connector
// when present, else from the fields only one connector writes, so that
// abridged and flattened source blocks still get the right version.
func connectorKind(src map[string]any) string {
	if c, ok := src["connector"].(string); ok {
		switch c {
		case "postgresql":
			return KindPostgres
		case "mysql", "mariadb":
			return KindMySQL
		case "sqlserver":
			return KindSQLServer
		case "oracle":
			return KindOracle
		case "mongodb":
			return KindMongo
		}
	}
	has := func(k string) bool { return src[k] != nil }
	switch {
	case has("lsn") && !has("scn"):
		return KindPostgres
	case has("file") && has("pos"):
		return KindMySQL
	case has("commit_lsn") || has("change_lsn"):
		return KindSQLServer
	case has("scn") || has("commit_scn"):
		return KindOracle
	case has("ord") && (has("rs") || has("collection")):
		return KindMongo
	}
	return ""
}

// tableName is "schema.table" from the source block (MySQL: db.table,
// MongoDB: db.collection), else the last two parts of the topic
// (server.schema.table, or server.db.schema.table for SQL Server 2.x).
func tableName(src map[string]any, kind, topic string) string {
	str := func(k string) string { s, _ := src[k].(string); return s }
	ns, tbl := str("schema"), str("table")
	switch kind {
	case KindMySQL:
		ns = str("db")
	case KindMongo:
		ns, tbl = str("db"), str("collection")
	}
	if ns == "" && kind == "" {
		ns = str("db") // unknown connector: db is the best namespace there is
	}
	if ns != "" && tbl != "" {
		return TableName(ns, tbl)
	}
	if parts := strings.Split(topic, "."); len(parts) >= 2 && parts[len(parts)-2] != "" && parts[len(parts)-1] != "" {
		return TableName(parts[len(parts)-2], parts[len(parts)-1])
	}
	if tbl == "" {
		return ""
	}
	return TableName("", tbl)
}

var (
	nsEscaper    = strings.NewReplacer("%", "%25", ".", "%2E", "/", "%2F")
	tableEscaper = strings.NewReplacer("%", "%25", "/", "%2F")
)

// TableName is Change.Table for namespace ns (schema, MySQL database,
// MongoDB database) and table (collection) name: "ns.table", with '%' and
// '/' percent-escaped in both parts and '.' in the namespace, so the first
// '.' always ends the namespace and different (ns, table) pairs never share
// a name: schema "sales" + table "eu.orders" is "sales.eu.orders", schema
// "sales.eu" + table "orders" is "sales%2Eeu.orders". Plain
// names, and MongoDB's dotted collection names (a database name has no
// dots), are unchanged. With no namespace the table's dots are escaped too.
// Sources other than the decoder must build Change.Table with it.
func TableName(ns, table string) string {
	if ns == "" {
		return nsEscaper.Replace(table)
	}
	return nsEscaper.Replace(ns) + "." + tableEscaper.Replace(table)
}

var errNoVersion = errors.New("no version")

// debeziumSource is the source a Debezium event's positions belong to: the
// connector's logical server name (source.name, the topic prefix) and its
// database (source.db), "dbz:<name>/<db>". Two connectors, or one
// connector's two databases, never share positions, so their versions are
// never compared by position (see Version). Empty when the event names
// neither (an abridged or flattened source block): an unknown source.
func debeziumSource(src map[string]any) string {
	name, _ := src["name"].(string)
	db, _ := src["db"].(string)
	if name == "" && db == "" {
		return ""
	}
	return "dbz:" + name + "/" + db
}

// sourceVersion orders the changes of one document. Each connector's
// position is used where it is per-row monotonic; "ts" (source ts_ms) is the
// last resort, since two changes in one millisecond tie.
func sourceVersion(src, payload map[string]any, kind string) (Version, error) {
	switch kind {
	case KindPostgres:
		// LSN of the change record: two writers of one row are serialised by
		// the row lock, so the later change always has the larger LSN. txId
		// is not used: xids are assigned at first write, not at commit.
		if lsn, ok, err := uintField(src, "source.lsn", "lsn"); err != nil {
			return Version{}, err
		} else if ok {
			return Version{Kind: KindPostgres, Parts: []uint64{lsn}}, nil
		}
	case KindMySQL:
		if v, ok, err := mysqlVersion(src); err != nil || ok {
			return v, err
		}
	case KindSQLServer:
		if v, ok, err := sqlServerVersion(src); err != nil || ok {
			return v, err
		}
	case KindOracle:
		scn, okS, err := uintField(src, "source.scn", "scn")
		if err != nil {
			return Version{}, err
		}
		commit, okC, err := uintField(src, "source.commit_scn", "commit_scn")
		if err != nil {
			return Version{}, err
		}
		// commit_scn orders transactions; scn orders the changes within one.
		switch {
		case okC && okS:
			return Version{Kind: KindOracle, Parts: []uint64{commit, scn}}, nil
		case okC:
			return Version{Kind: KindOracle, Parts: []uint64{commit}}, nil
		case okS:
			return Version{Kind: KindOracle, Parts: []uint64{scn}}, nil
		}
	case KindMongo:
		sec, okSec, err := uintField(src, "source.ts_sec", "ts_sec")
		if err != nil {
			return Version{}, err
		}
		if !okSec {
			ms, okMS, err := uintField(src, "source.ts_ms", "ts_ms")
			if err != nil {
				return Version{}, err
			}
			sec, okSec = toMillis(ms)/1000, okMS
		}
		ord, _, err := uintField(src, "source.ord", "ord")
		if err != nil {
			return Version{}, err
		}
		// ord is the oplog/cluster-time increment within one second. All
		// changes of one transaction share (sec, ord): the transaction
		// block's order tells them apart.
		if okSec {
			return withTxOrder(Version{Kind: KindMongo, Parts: []uint64{sec, ord}}, payload)
		}
	}
	ms, ok, err := sourceMillis(src, payload)
	if err != nil {
		return Version{}, err
	}
	if !ok {
		return Version{}, errNoVersion
	}
	// A transaction's changes share its commit time, so its order is the
	// only thing that tells two of them apart.
	return withTxOrder(Version{Kind: KindTS, Parts: []uint64{ms}}, payload)
}

// withTxOrder appends the change's place in its transaction to v: the
// transaction block's total_order (1-based, across the transaction), else
// data_collection_order (within this table), as written with
// provide.transaction.metadata=true. A change outside a transaction block
// keeps the shorter tuple, which sorts first.
func withTxOrder(v Version, payload map[string]any) (Version, error) {
	tx, ok := payload["transaction"].(map[string]any)
	if !ok {
		return v, nil
	}
	n, ok, err := uintField(tx, "transaction.total_order", "total_order")
	if err != nil {
		return Version{}, err
	}
	if !ok {
		if n, ok, err = uintField(tx, "transaction.data_collection_order", "data_collection_order"); err != nil {
			return Version{}, err
		}
	}
	if ok {
		v.Parts = append(v.Parts, n)
	}
	return v, nil
}

// mysqlVersion is (binlog file sequence, position, row within the event).
// The file's numeric suffix makes the order survive binlog rotation:
// mysql-bin.000010 follows mysql-bin.000009.
func mysqlVersion(src map[string]any) (Version, bool, error) {
	file, isStr := src["file"].(string)
	if src["file"] != nil && !isStr {
		return Version{}, false, &fieldError{"source.file", fmt.Errorf("want a string, got %s", describe(src["file"]))}
	}
	pos, okPos, err := uintField(src, "source.pos", "pos")
	if err != nil {
		return Version{}, false, err
	}
	if file == "" || !okPos {
		return Version{}, false, nil
	}
	i := strings.LastIndexByte(file, '.')
	seq, err := strconv.ParseUint(file[i+1:], 10, 64)
	if err != nil {
		return Version{}, false, &fieldError{"source.file", fmt.Errorf("%q has no numeric binlog suffix", file)}
	}
	row, _, err := uintField(src, "source.row", "row")
	if err != nil {
		return Version{}, false, err
	}
	return Version{Kind: KindMySQL, Parts: []uint64{seq, pos, row}}, true, nil
}

// sqlServerVersion is commit_lsn then change_lsn, each "vlf:block:slot" in
// hex. Snapshot reads have no change_lsn; its groups are then zero, which
// sorts a snapshot row before any streamed change of the same commit.
func sqlServerVersion(src map[string]any) (Version, bool, error) {
	commit, okC, err := lsnGroups(src, "commit_lsn")
	if err != nil {
		return Version{}, false, err
	}
	change, okCh, err := lsnGroups(src, "change_lsn")
	if err != nil {
		return Version{}, false, err
	}
	if !okC && !okCh {
		return Version{}, false, nil
	}
	parts := make([]uint64, 0, 6)
	parts = append(parts, commit[:]...)
	parts = append(parts, change[:]...)
	return Version{Kind: KindSQLServer, Parts: parts}, true, nil
}

func lsnGroups(src map[string]any, key string) ([3]uint64, bool, error) {
	var g [3]uint64
	v := src[key]
	if v == nil {
		return g, false, nil
	}
	s, ok := v.(string)
	if !ok {
		return g, false, &fieldError{"source." + key, fmt.Errorf("want \"hex:hex:hex\", got %s", describe(v))}
	}
	if s == "" || s == "NULL" {
		return g, false, nil
	}
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return g, false, &fieldError{"source." + key, fmt.Errorf("want \"hex:hex:hex\", got %q", s)}
	}
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 16, 64)
		if err != nil {
			return g, false, &fieldError{"source." + key, fmt.Errorf("want \"hex:hex:hex\", got %q", s)}
		}
		g[i] = n
	}
	return g, true, nil
}

func uintField(m map[string]any, name, key string) (uint64, bool, error) {
	n, ok, err := asUint(m[key])
	if err != nil {
		return 0, false, &fieldError{name, err}
	}
	return n, ok, nil
}

// sourceMillis is the source database's commit time in ms: source.ts_ms,
// else the legacy MySQL/MongoDB source.ts_sec, else the envelope's ts_ms
// (when Debezium processed it). A zero means "unknown" (MySQL snapshots
// write ts_ms: 0) and falls through.
func sourceMillis(src, payload map[string]any) (uint64, bool, error) {
	if ms, ok, err := uintField(src, "source.ts_ms", "ts_ms"); err != nil {
		return 0, false, err
	} else if ok && ms > 0 {
		return toMillis(ms), true, nil
	}
	if sec, ok, err := uintField(src, "source.ts_sec", "ts_sec"); err != nil {
		return 0, false, err
	} else if ok && sec > 0 {
		if sec > maxMillis/1000 { // nonsense seconds; keep it finite
			return toMillis(sec), true, nil
		}
		return sec * 1000, true, nil
	}
	if ms, ok, err := uintField(payload, "ts_ms", "ts_ms"); err != nil {
		return 0, false, err
	} else if ok && ms > 0 {
		return toMillis(ms), true, nil
	}
	return 0, false, nil
}

// maxMillis is 1e14 ms, the year 5138: no real ms timestamp is larger, so a
// larger "ts_ms" is in µs or ns (Debezium's MongoDB docs print ts_ms three
// times with ts_us/ts_ns values; last-wins JSON parsing keeps the ns one).
const maxMillis = 100_000_000_000_000

// toMillis scales a timestamp that is too large to be in ms down until it
// is; this also keeps every SourceTS within what time.Time marshals.
func toMillis(ms uint64) uint64 {
	for ms > maxMillis {
		ms /= 1000
	}
	return ms
}

// sourceTime is sourceMillis as a time; zero when unknown.
func sourceTime(src, payload map[string]any) (time.Time, error) {
	ms, ok, err := sourceMillis(src, payload)
	if err != nil || !ok {
		return time.Time{}, err
	}
	return time.UnixMilli(int64(ms)).UTC(), nil
}

// snapshotFlag reads source.snapshot: a boolean in current versions, a
// string ("true", "last", "first", "incremental", "last_in_data_collection"…)
// in others. Only false, "false", "" and null mean streaming.
func snapshotFlag(src map[string]any) (bool, error) {
	switch v := src["snapshot"].(type) {
	case nil:
		return false, nil
	case bool:
		return v, nil
	case string:
		return v != "" && !strings.EqualFold(v, "false"), nil
	default:
		return false, &fieldError{"source.snapshot", fmt.Errorf("want a boolean or string, got %s", describe(v))}
	}
}

// txID is the source transaction: source.txId (PostgreSQL, Oracle), else the
// transaction block's id (provide.transaction.metadata), else MySQL's gtid.
func txID(src, payload map[string]any) string {
	if s, ok := asText(src["txId"]); ok {
		return s
	}
	if tx, ok := payload["transaction"].(map[string]any); ok {
		if s, ok := asText(tx["id"]); ok {
			return s
		}
	}
	if s, ok := asText(src["gtid"]); ok {
		return s
	}
	return ""
}
