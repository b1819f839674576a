package cdc

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// PostgresSessionParams sets, in a connection's runtime parameters, the
// output formats PostgresValue expects: ISO dates, UTC for timestamptz,
// hex bytea and shortest exact floats. The replication connection (pgoutput
// formats values in the walsender) and every snapshot reader use them, so
// a value is the same text whichever of them read it.
func PostgresSessionParams(p map[string]string) {
	p["DateStyle"] = "ISO, MDY"
	p["TimeZone"] = "UTC"
	p["IntervalStyle"] = "postgres"
	p["bytea_output"] = "hex"
	p["extra_float_digits"] = "1"
}

// pgTypes knows the built-in types' OIDs and, for arrays, their element
// types. It is only read after init, so sharing it is safe.
var pgTypes = pgtype.NewMap()

// pgValue decodes one column from pgoutput's text format into the value the
// Debezium decoder gives for the same column (Debezium PostgreSQL connector,
// "Data type mappings", with its defaults: decimal.handling.mode=precise,
// time.precision.mode=adaptive, binary.handling.mode=bytes), so a document
// renders the same whichever way its changes arrive:
//
//	numeric, ints, floats  json.Number (exact digits)
//	timestamp              RFC 3339 UTC (MicroTimestamp read as UTC)
//	timestamptz            RFC 3339 UTC (ZonedTimestamp)
//	date                   2006-01-02
//	time                   15:04:05.000000
//	json, jsonb            the parsed value
//	bytea                  base64
//	arrays                 []any of the element's values
//	anything else          the text as it is (uuid, enums, text, …)
func pgValue(oid uint32, text string) (any, error) {
	switch oid {
	case pgtype.BoolOID:
		return text == "t", nil
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.OIDOID:
		return json.Number(text), nil
	case pgtype.NumericOID, pgtype.Float4OID, pgtype.Float8OID:
		switch text {
		case "NaN", "Infinity", "-Infinity":
			// JSON has no such numbers; Debezium's exact decimal has none
			// either and writes null, doubles keep a string.
			if oid == pgtype.NumericOID {
				return nil, nil
			}
			return text, nil
		}
		return json.Number(text), nil
	case pgtype.JSONOID, pgtype.JSONBOID:
		v, err := parseJSON([]byte(text))
		if err != nil {
			return nil, fmt.Errorf("json: %w", err)
		}
		return v, nil
	case pgtype.ByteaOID:
		if !strings.HasPrefix(text, `\x`) {
			return nil, fmt.Errorf("bytea: want hex output (bytea_output=hex), got %.20q", text)
		}
		b, err := hex.DecodeString(text[2:])
		if err != nil {
			return nil, fmt.Errorf("bytea: %w", err)
		}
		return base64.StdEncoding.EncodeToString(b), nil
	case pgtype.TimestampOID:
		return pgTimestamp(text, false)
	case pgtype.TimestamptzOID:
		return pgTimestamp(text, true)
	case pgtype.DateOID:
		return text, nil // ISO DateStyle already gives 2006-01-02
	case pgtype.TimeOID:
		return pgTimeOfDay(text)
	}
	if t, ok := pgTypes.TypeForOID(oid); ok {
		if ac, ok := t.Codec.(*pgtype.ArrayCodec); ok {
			return pgArray(text, ac.ElementType.OID)
		}
	}
	return text, nil
}

// pgTimestamp parses timestamp output (DateStyle ISO; the replication
// session's TimeZone gives the offset of a timestamptz). Infinity and BC
// dates have no RFC 3339 form and are kept as text.
func pgTimestamp(text string, zoned bool) (any, error) {
	if text == "infinity" || text == "-infinity" || strings.HasSuffix(text, " BC") {
		return text, nil
	}
	layout := "2006-01-02 15:04:05.999999999"
	if zoned {
		// Offsets come as +00, +05:30 or, for historic zones, +00:09:21.
		switch i := strings.LastIndexAny(text, "+-"); {
		case i < 0:
		case len(text)-i == 3:
			layout += "-07"
		case len(text)-i == 6:
			layout += "-07:00"
		default:
			layout += "-07:00:00"
		}
	}
	t, err := time.Parse(layout, text)
	if err != nil {
		return nil, fmt.Errorf("timestamp: %w", err)
	}
	return t.UTC().Format(time.RFC3339Nano), nil
}

// pgTimeOfDay renders time output as Debezium's MicroTime does.
func pgTimeOfDay(text string) (any, error) {
	var h, m, s, us int
	whole, frac, _ := strings.Cut(text, ".")
	if _, err := fmt.Sscanf(whole, "%d:%d:%d", &h, &m, &s); err != nil {
		return nil, fmt.Errorf("time: %q: %w", text, err)
	}
	if frac != "" {
		frac = (frac + "000000")[:6]
		if _, err := fmt.Sscanf(frac, "%d", &us); err != nil {
			return nil, fmt.Errorf("time: %q: %w", text, err)
		}
	}
	return fmt.Sprintf("%02d:%02d:%02d.%06d", h, m, s, us), nil
}

var (
	errArray      = errors.New("malformed array literal")
	errArrayDepth = errors.New("array nested deeper than 128 levels")
)

// maxArrayDepth bounds array nesting as the JSON parser bounds objects.
const maxArrayDepth = 128

// pgArray parses an array literal ({a,"b c",NULL}, nested for more
// dimensions; an explicit-bounds prefix [0:1]= is dropped) and decodes each
// element as its type.
func pgArray(text string, elem uint32) (any, error) {
	if strings.HasPrefix(text, "[") {
		if i := strings.Index(text, "="); i > 0 {
			text = text[i+1:]
		}
	}
	p := arrayParser{s: text, elem: elem}
	v, err := p.parse(0)
	if err != nil {
		return nil, fmt.Errorf("array %.40q: %w", text, err)
	}
	if p.i != len(p.s) {
		return nil, fmt.Errorf("array %.40q: %w: trailing text", text, errArray)
	}
	return v, nil
}

type arrayParser struct {
	s    string
	i    int
	elem uint32
}

func (p *arrayParser) parse(depth int) ([]any, error) {
	if depth > maxArrayDepth {
		return nil, errArrayDepth
	}
	if p.i >= len(p.s) || p.s[p.i] != '{' {
		return nil, errArray
	}
	p.i++
	out := []any{}
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return out, nil
	}
	for {
		if p.i >= len(p.s) {
			return nil, errArray
		}
		var v any
		var err error
		switch p.s[p.i] {
		case '{':
			v, err = p.parse(depth + 1)
		case '"':
			var str string
			if str, err = p.quoted(); err == nil {
				v, err = pgValue(p.elem, str)
			}
		default:
			start := p.i
			for p.i < len(p.s) && p.s[p.i] != ',' && p.s[p.i] != '}' {
				p.i++
			}
			if str := p.s[start:p.i]; !strings.EqualFold(str, "NULL") {
				v, err = pgValue(p.elem, str)
			}
		}
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		if p.i >= len(p.s) {
			return nil, errArray
		}
		switch p.s[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return out, nil
		default:
			return nil, errArray
		}
	}
}

func (p *arrayParser) quoted() (string, error) {
	p.i++ // opening quote
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch c {
		case '\\':
			if p.i >= len(p.s) {
				return "", errArray
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case '"':
			return b.String(), nil
		default:
			b.WriteByte(c)
		}
	}
	return "", errArray
}

// PostgresValue decodes one column value in Postgres' text output format,
// of the type with OID oid, into the value the Decoder gives for the same
// column of a Debezium event (see pgValue), so that every transport that
// reads Postgres rows itself (the replication slot source, its initial
// load, the backfill reader) renders a row as Debezium's events do. The
// session that read the text must have the settings of
// PostgresSessionParams. Text that does not parse as its type (a server
// setting ragsync did not expect) comes back as it is: a stream must not
// stall on one value, and text is what the Debezium connector gives for
// types it does not know.
func PostgresValue(oid uint32, text string) any {
	v, err := pgValue(oid, text)
	if err != nil {
		return text
	}
	return v
}
