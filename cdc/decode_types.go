package cdc

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// Logical type names from Kafka Connect and Debezium (Debezium reference,
// "Data type mappings" of each connector; Kafka Connect's
// org.apache.kafka.connect.data package).
const (
	ltDecimal         = "org.apache.kafka.connect.data.Decimal"
	ltVariableDecimal = "io.debezium.data.VariableScaleDecimal"
	ltDate            = "io.debezium.time.Date"
	ltConnectDate     = "org.apache.kafka.connect.data.Date"
	ltTimestamp       = "io.debezium.time.Timestamp"
	ltConnectTS       = "org.apache.kafka.connect.data.Timestamp"
	ltMicroTimestamp  = "io.debezium.time.MicroTimestamp"
	ltNanoTimestamp   = "io.debezium.time.NanoTimestamp"
	ltTime            = "io.debezium.time.Time"
	ltConnectTime     = "org.apache.kafka.connect.data.Time"
	ltMicroTime       = "io.debezium.time.MicroTime"
	ltNanoTime        = "io.debezium.time.NanoTime"
	ltJSON            = "io.debezium.data.Json"
)

// maxEpochDays keeps date arithmetic far from int64 overflow (±273,000 years).
const maxEpochDays = 100_000_000

// schemaField returns the sub-schema of the struct schema s named name.
func schemaField(s map[string]any, name string) map[string]any {
	fields, _ := s["fields"].([]any)
	for _, f := range fields {
		fm, _ := f.(map[string]any)
		if n, _ := fm["field"].(string); n == name {
			return fm
		}
	}
	return nil
}

// convertRow applies the row schema s (a Connect struct schema) to row in
// place. Without a schema there is nothing to convert: values stay as parsed.
func convertRow(row map[string]any, s map[string]any) error {
	if s == nil {
		return nil
	}
	for col, v := range row {
		fs := schemaField(s, col)
		if fs == nil {
			continue
		}
		nv, err := convertValue(v, fs, 0)
		if err != nil {
			return fmt.Errorf("column %q: %w", col, err)
		}
		row[col] = nv
	}
	return nil
}

// convertValue decodes v according to its Connect schema s: logical types by
// name, and structs, arrays and maps element-wise so that an array of dates
// comes out as an array of date strings.
func convertValue(v any, s map[string]any, depth int) (any, error) {
	if v == nil || s == nil {
		return v, nil
	}
	if depth > maxDepth {
		return nil, errTooDeep
	}
	name, _ := s["name"].(string)
	switch name {
	case ltDecimal:
		return decodeDecimal(v, s)
	case ltVariableDecimal:
		return decodeVariableDecimal(v)
	case ltDate, ltConnectDate:
		d, err := asInt(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if d > maxEpochDays || d < -maxEpochDays {
			return nil, fmt.Errorf("%s: %d days is out of range", name, d)
		}
		return time.Unix(d*86400, 0).UTC().Format(time.DateOnly), nil
	case ltTimestamp, ltConnectTS:
		return epochTime(v, name, time.Millisecond)
	case ltMicroTimestamp:
		return epochTime(v, name, time.Microsecond)
	case ltNanoTimestamp:
		return epochTime(v, name, time.Nanosecond)
	case ltTime, ltConnectTime:
		return timeOfDay(v, name, time.Millisecond)
	case ltMicroTime:
		return timeOfDay(v, name, time.Microsecond)
	case ltNanoTime:
		return timeOfDay(v, name, time.Nanosecond)
	case ltJSON:
		str, ok := v.(string)
		if !ok {
			return v, nil // already structured (a converter that inlines JSON)
		}
		parsed, err := parseJSON([]byte(str))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return parsed, nil
	}
	typ, _ := s["type"].(string)
	switch typ {
	case "struct":
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("struct: want an object, got %s", describe(v))
		}
		for k, fv := range m {
			fs := schemaField(s, k)
			if fs == nil {
				continue
			}
			nv, err := convertValue(fv, fs, depth+1)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			m[k] = nv
		}
		return m, nil
	case "array":
		items, _ := s["items"].(map[string]any)
		a, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("array: want an array, got %s", describe(v))
		}
		if items == nil {
			return v, nil
		}
		for i, e := range a {
			ne, err := convertValue(e, items, depth+1)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			a[i] = ne
		}
		return a, nil
	case "map":
		// JsonConverter writes string-keyed maps as objects; other key types
		// as [[k,v]…] arrays, which are left alone.
		vals, _ := s["values"].(map[string]any)
		m, ok := v.(map[string]any)
		if _, pairs := v.([]any); !ok && !pairs {
			return nil, fmt.Errorf("map: want an object or an array of pairs, got %s", describe(v))
		}
		if !ok || vals == nil {
			return v, nil
		}
		for k, e := range m {
			ne, err := convertValue(e, vals, depth+1)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			m[k] = ne
		}
		return m, nil
	}
	if err := checkPrimitive(v, typ); err != nil {
		return nil, err
	}
	if n, ok := v.(json.Number); ok && isFloatType(typ) {
		return postgresFloat(n, typ), nil
	}
	return v, nil
}

// isFloatType reports a Connect floating-point schema type: JsonConverter
// names them "float" and "double", Connect's Java enum FLOAT32 and FLOAT64.
func isFloatType(typ string) bool {
	switch typ {
	case "float32", "float64", "float", "double":
		return true
	}
	return false
}

// postgresFloat writes a floating-point value as Postgres writes a float8
// (float4 for float32) with extra_float_digits=1: the shortest digits that
// read back as the same value, in fixed notation for decimal exponents from
// -4 to 14 (5 for float4), else as 1.5e+20. The Debezium converter writes
// 20.0, 1.0E20 or 1.0E-5 for the same values; without this a double
// column's text differed between a Debezium event ("20.0") and the Postgres
// source and backfill, which read Postgres' own output ("20").
func postgresFloat(n json.Number, typ string) json.Number {
	bits, maxExp := 64, 15
	if typ == "float32" || typ == "float" {
		bits, maxExp = 32, 6
	}
	f, err := strconv.ParseFloat(string(n), bits)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return n // out of range: keep the digits the event carried
	}
	e := strconv.FormatFloat(f, 'e', -1, bits)
	exp, err := strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
	if err != nil || exp < -4 || exp >= maxExp {
		return json.Number(e)
	}
	return json.Number(strconv.FormatFloat(f, 'f', -1, bits))
}

// checkPrimitive fails when v contradicts its Connect schema type, as Kafka
// Connect's JsonConverter does ("Invalid type ... for schema type STRING"):
// a number where the schema says string would otherwise be indexed as if
// the source had written it.
func checkPrimitive(v any, typ string) error {
	bad := func() error { return fmt.Errorf("%s: want a %s, got %s", typ, typ, describe(v)) }
	switch typ {
	case "string":
		if _, ok := v.(string); !ok {
			return bad()
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return bad()
		}
	case "int8", "int16", "int32", "int64":
		n, ok := v.(json.Number)
		if !ok {
			return bad()
		}
		bits, _ := strconv.Atoi(typ[3:])
		if _, err := strconv.ParseInt(string(n), 10, bits); err != nil {
			return fmt.Errorf("%s: %s is not an integer in range", typ, n)
		}
	case "float32", "float64", "float", "double":
		switch f := v.(type) {
		case json.Number:
		case string:
			// JSON has no NaN or infinity; Jackson writes them as strings.
			if f != "NaN" && f != "Infinity" && f != "-Infinity" {
				return bad()
			}
		default:
			return bad()
		}
	case "bytes":
		b, ok := v.(string)
		if !ok {
			return bad()
		}
		if _, err := base64.StdEncoding.DecodeString(b); err != nil {
			return fmt.Errorf("bytes: %s is not base64", describe(v))
		}
	}
	return nil
}

// decodeDecimal turns Connect's Decimal (base64 big-endian two's-complement
// unscaled value, scale in the schema parameters) into an exact json.Number.
func decodeDecimal(v any, s map[string]any) (any, error) {
	switch v := v.(type) {
	case json.Number:
		return v, nil // decimal.handling.mode=double already gave a number
	case string:
		params, _ := s["parameters"].(map[string]any)
		scale, ok, err := asUint(params["scale"])
		if err != nil || !ok || scale > 1000 {
			return nil, fmt.Errorf("%s: bad or missing parameters.scale %s", ltDecimal, describe(params["scale"]))
		}
		return unscaledToNumber(v, int(scale))
	}
	return nil, fmt.Errorf("%s: want a base64 string, got %s", ltDecimal, describe(v))
}

// decodeVariableDecimal handles Debezium's {"scale": n, "value": base64} for
// NUMERIC columns without a declared scale.
func decodeVariableDecimal(v any) (any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		if n, isNum := v.(json.Number); isNum {
			return n, nil
		}
		return nil, fmt.Errorf("%s: want {scale,value}, got %s", ltVariableDecimal, describe(v))
	}
	scale, ok, err := asUint(m["scale"])
	if err != nil || !ok || scale > 1000 {
		return nil, fmt.Errorf("%s: bad scale %s", ltVariableDecimal, describe(m["scale"]))
	}
	str, ok := m["value"].(string)
	if !ok {
		return nil, fmt.Errorf("%s: want a base64 value, got %s", ltVariableDecimal, describe(m["value"]))
	}
	return unscaledToNumber(str, int(scale))
}

func unscaledToNumber(b64 string, scale int) (json.Number, error) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "", fmt.Errorf("decimal: %q is not base64", b64)
	}
	if len(raw) == 0 {
		return "", fmt.Errorf("decimal: empty unscaled value")
	}
	n := new(big.Int).SetBytes(raw)
	if raw[0]&0x80 != 0 { // two's complement: subtract 2^(8·len)
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(raw))))
	}
	neg := n.Sign() < 0
	digits := n.Abs(n).String()
	if scale > 0 {
		if len(digits) <= scale {
			digits = zeros(scale-len(digits)+1) + digits
		}
		digits = digits[:len(digits)-scale] + "." + digits[len(digits)-scale:]
	}
	if neg {
		digits = "-" + digits
	}
	return json.Number(digits), nil
}

func zeros(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = '0'
	}
	return string(b)
}

// epochTime renders an epoch count in unit as an RFC 3339 UTC timestamp.
func epochTime(v any, name string, unit time.Duration) (any, error) {
	n, err := asInt(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	per := int64(time.Second / unit)
	sec, frac := n/per, n%per
	if frac < 0 {
		sec, frac = sec-1, frac+per
	}
	return time.Unix(sec, frac*int64(unit)).UTC().Format(time.RFC3339Nano), nil
}

// timeOfDay renders a time-of-day count in unit as "15:04:05.000000". It
// does not wrap at 24h: PostgreSQL's TIME '24:00:00' stays 24:00:00.
func timeOfDay(v any, name string, unit time.Duration) (any, error) {
	n, err := asInt(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if n < 0 {
		return nil, fmt.Errorf("%s: negative time of day %d", name, n)
	}
	var us int64
	switch unit {
	case time.Millisecond:
		if n > math.MaxInt64/1000 {
			return nil, fmt.Errorf("%s: %d is out of range", name, n)
		}
		us = n * 1000
	case time.Microsecond:
		us = n
	default:
		us = n / 1000
	}
	h, rem := us/3_600_000_000, us%3_600_000_000
	m, rem := rem/60_000_000, rem%60_000_000
	s, frac := rem/1_000_000, rem%1_000_000
	return fmt.Sprintf("%02d:%02d:%02d.%06d", h, m, s, frac), nil
}
