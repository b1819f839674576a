package registry

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/hamba/avro/v2"
)

// Connect names and properties that Confluent's AvroConverter writes into
// the Avro schemas it registers (io.confluent.connect.avro.AvroData), to
// read a Connect schema back from Avro.
const (
	propConnectName    = "connect.name"
	propConnectVersion = "connect.version"
	propConnectParams  = "connect.parameters"
	propConnectDoc     = "connect.doc"
	propConnectDefault = "connect.default"
	propConnectType    = "connect.type"
	// A Connect map whose keys are not strings is an Avro array of these
	// records, each with a "key" and a "value" field.
	avroMapEntry = "io.confluent.connect.avro.MapEntry"
	// A union other than ["null", T] is a Connect struct of this name with
	// one optional field per branch, only the one written being set.
	avroUnion   = "io.confluent.connect.avro.Union"
	avroEnum    = "io.confluent.connect.avro.Enum"
	avroDefault = "io.confluent.connect.avro.ConnectDefault"
	// Debezium's names for the microsecond types, which Connect lacks.
	debeziumMicroTime      = "io.debezium.time.MicroTime"
	debeziumMicroTimestamp = "io.debezium.time.MicroTimestamp"
	precisionParam         = "connect.decimal.precision"
)

// maxSchemaDepth bounds the nesting of a schema's types.
const maxSchemaDepth = 128

// avroKind is what one node of a compiled Avro schema reads.
type avroKind uint8

const (
	kNull avroKind = iota
	kBoolean
	kInt
	kLong
	kFloat
	kDouble
	kString
	kBytes
	kFixed
	kEnum
	kRecord
	kArray
	kMap
	kPairs    // an array of MapEntry records, read as JsonConverter's [[k, v], …]
	kNullable // ["null", T] or [T, "null"]
	kUnion    // any other union, read as a Connect struct of branches
)

// avroNode reads one Avro type into the JSON converter's tree.
type avroNode struct {
	kind     avroKind
	fields   []avroField // kRecord
	elem     *avroNode   // kArray, kMap (the values), kNullable (T)
	key      *avroNode   // kPairs (elem is the value)
	null     int64       // kNullable: the index of the null branch
	branches []*avroNode // kUnion: nil for the null branch
	names    []string    // kUnion: the field of each branch
	symbols  []string    // kEnum
	size     int         // kFixed
}

type avroField struct {
	name string
	node *avroNode
}

// avroFormat is a compiled Avro schema: its reader and the Connect schema
// of what it reads, built once.
type avroFormat struct {
	root    *avroNode
	connect map[string]any
}

// compileAvro compiles an Avro schema and the schemas it references (name
// → text, as a registry resolves Avro references to named types in other
// subjects).
func compileAvro(text string, refs map[string]string) (format, error) {
	cache := &avro.SchemaCache{}
	// A reference may itself use another; parse in rounds until every one
	// parses or a round makes no progress.
	pending := make(map[string]string, len(refs))
	for name, t := range refs {
		pending[name] = t
	}
	for len(pending) > 0 {
		var lastErr error
		progress := false
		for name, t := range pending {
			if _, err := avro.ParseWithCache(t, "", cache); err != nil {
				lastErr = fmt.Errorf("reference %s: %w", name, err)
				continue
			}
			delete(pending, name)
			progress = true
		}
		if !progress {
			return nil, lastErr
		}
	}
	s, err := avro.ParseWithCache(text, "", cache)
	if err != nil {
		return nil, err
	}
	c := avroCompiler{open: map[string]bool{}}
	root, connect, err := c.node(s, 0)
	if err != nil {
		return nil, err
	}
	return &avroFormat{root: root, connect: connect}, nil
}

type avroCompiler struct {
	open map[string]bool // named types being compiled: a recursive type
}

type propSchema interface{ Prop(string) any }

func prop(s avro.Schema, name string) any {
	if p, ok := s.(propSchema); ok {
		return p.Prop(name)
	}
	return nil
}

// connectProps sets the Connect name, version, doc, parameters and default
// that AvroData recorded as properties of s.
func connectProps(s avro.Schema, out map[string]any) {
	if n, ok := prop(s, propConnectName).(string); ok && n != "" {
		out["name"] = n
	}
	switch v := prop(s, propConnectVersion).(type) {
	case float64:
		out["version"] = json.Number(strconv.FormatInt(int64(v), 10))
	case int:
		out["version"] = json.Number(strconv.Itoa(v))
	case json.Number:
		out["version"] = v
	}
	if d, ok := prop(s, propConnectDoc).(string); ok {
		out["doc"] = d
	}
	if ps, ok := prop(s, propConnectParams).(map[string]any); ok {
		params := make(map[string]any, len(ps))
		for k, v := range ps {
			params[k] = v
		}
		out["parameters"] = params
	}
	if d := prop(s, propConnectDefault); d != nil {
		out["default"] = d
	}
}

// node compiles s into its reader and its Connect schema (without "field"
// or "optional", which the enclosing field or union sets).
func (c *avroCompiler) node(s avro.Schema, depth int) (*avroNode, map[string]any, error) {
	if depth > maxSchemaDepth {
		return nil, nil, fmt.Errorf("schema nested deeper than %d", maxSchemaDepth)
	}
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	cs := map[string]any{}
	switch s := s.(type) {
	case *avro.NullSchema:
		return &avroNode{kind: kNull}, nil, nil
	case *avro.PrimitiveSchema:
		n, err := primitive(s, cs)
		connectProps(s, cs)
		return n, cs, err
	case *avro.FixedSchema:
		cs["type"] = "bytes"
		if d, ok := s.Logical().(*avro.DecimalLogicalSchema); ok {
			decimalSchema(d, cs)
		} else {
			cs["name"] = s.FullName()
			cs["parameters"] = map[string]any{"connect.fixed.size": strconv.Itoa(s.Size())}
		}
		connectProps(s, cs)
		return &avroNode{kind: kFixed, size: s.Size()}, cs, nil
	case *avro.EnumSchema:
		cs["type"] = "string"
		cs["name"] = s.FullName()
		params := map[string]any{avroEnum: s.FullName()}
		for _, sym := range s.Symbols() {
			params[avroEnum+"."+sym] = sym
		}
		cs["parameters"] = params
		connectProps(s, cs)
		return &avroNode{kind: kEnum, symbols: s.Symbols()}, cs, nil
	case *avro.RecordSchema:
		return c.record(s, cs, depth)
	case *avro.ArraySchema:
		if rec, ok := deref(s.Items()).(*avro.RecordSchema); ok && isMapEntry(rec) {
			return c.pairs(s, rec, cs, depth)
		}
		elem, items, err := c.optional(s.Items(), depth+1)
		if err != nil {
			return nil, nil, err
		}
		cs["type"] = "array"
		cs["items"] = items
		connectProps(s, cs)
		return &avroNode{kind: kArray, elem: elem}, cs, nil
	case *avro.MapSchema:
		elem, values, err := c.optional(s.Values(), depth+1)
		if err != nil {
			return nil, nil, err
		}
		cs["type"] = "map"
		cs["keys"] = map[string]any{"type": "string", "optional": false}
		cs["values"] = values
		connectProps(s, cs)
		return &avroNode{kind: kMap, elem: elem}, cs, nil
	case *avro.UnionSchema:
		return c.union(s, cs, depth)
	}
	return nil, nil, fmt.Errorf("unsupported Avro type %s", s.Type())
}

func deref(s avro.Schema) avro.Schema {
	if ref, ok := s.(*avro.RefSchema); ok {
		return ref.Schema()
	}
	return s
}

// primitive compiles a primitive type: Connect's type (int8 and int16 are
// Avro ints marked connect.type), and the Connect or Debezium name of a
// logical type when Connect did not write the schema itself.
func primitive(s *avro.PrimitiveSchema, cs map[string]any) (*avroNode, error) {
	var lt avro.LogicalType
	if l := s.Logical(); l != nil {
		lt = l.Type()
	}
	switch s.Type() {
	case avro.Boolean:
		cs["type"] = "boolean"
		return &avroNode{kind: kBoolean}, nil
	case avro.Int:
		cs["type"] = "int32"
		if t, _ := prop(s, propConnectType).(string); t == "int8" || t == "int16" {
			cs["type"] = t
		}
		switch lt {
		case avro.Date:
			cs["name"] = connectDate
		case avro.TimeMillis:
			cs["name"] = connectTime
		}
		return &avroNode{kind: kInt}, nil
	case avro.Long:
		cs["type"] = "int64"
		switch lt {
		case avro.TimestampMillis:
			cs["name"] = connectTimestamp
		case avro.TimestampMicros:
			cs["name"] = debeziumMicroTimestamp
		case avro.TimeMicros:
			cs["name"] = debeziumMicroTime
		}
		return &avroNode{kind: kLong}, nil
	case avro.Float:
		cs["type"] = "float"
		return &avroNode{kind: kFloat}, nil
	case avro.Double:
		cs["type"] = "double"
		return &avroNode{kind: kDouble}, nil
	case avro.String:
		cs["type"] = "string"
		return &avroNode{kind: kString}, nil
	case avro.Bytes:
		cs["type"] = "bytes"
		if d, ok := s.Logical().(*avro.DecimalLogicalSchema); ok {
			decimalSchema(d, cs)
		}
		return &avroNode{kind: kBytes}, nil
	}
	return nil, fmt.Errorf("unsupported Avro type %s", s.Type())
}

// decimalSchema names an Avro decimal Connect's Decimal: the same
// two's-complement big-endian unscaled bytes, the scale in parameters.
func decimalSchema(d *avro.DecimalLogicalSchema, cs map[string]any) {
	cs["name"] = connectDecimal
	params := map[string]any{"scale": strconv.Itoa(d.Scale())}
	if d.Precision() > 0 {
		params[precisionParam] = strconv.Itoa(d.Precision())
	}
	cs["parameters"] = params
}

func isMapEntry(r *avro.RecordSchema) bool {
	if r.FullName() != avroMapEntry {
		return false
	}
	fs := r.Fields()
	return len(fs) == 2 && fs[0].Name() == "key" && fs[1].Name() == "value"
}

func (c *avroCompiler) record(s *avro.RecordSchema, cs map[string]any, depth int) (*avroNode, map[string]any, error) {
	name := s.FullName()
	if c.open[name] {
		return nil, nil, fmt.Errorf("record %s is recursive, which Kafka Connect schemas cannot express", name)
	}
	c.open[name] = true
	defer delete(c.open, name)
	n := &avroNode{kind: kRecord, fields: make([]avroField, len(s.Fields()))}
	fields := make([]any, len(s.Fields()))
	for i, f := range s.Fields() {
		fn, fs, err := c.optional(f.Type(), depth+1)
		if err != nil {
			return nil, nil, fmt.Errorf("%s.%s: %w", name, f.Name(), err)
		}
		fs["field"] = f.Name()
		n.fields[i] = avroField{name: f.Name(), node: fn}
		fields[i] = fs
	}
	cs["type"] = "struct"
	cs["fields"] = fields
	if len(name) < len(avroDefault) || name[:len(avroDefault)] != avroDefault {
		cs["name"] = name
	}
	connectProps(s, cs)
	return n, cs, nil
}

func (c *avroCompiler) pairs(s *avro.ArraySchema, rec *avro.RecordSchema, cs map[string]any, depth int) (*avroNode, map[string]any, error) {
	key, keys, err := c.optional(rec.Fields()[0].Type(), depth+2)
	if err != nil {
		return nil, nil, err
	}
	val, values, err := c.optional(rec.Fields()[1].Type(), depth+2)
	if err != nil {
		return nil, nil, err
	}
	cs["type"] = "map"
	cs["keys"] = keys
	cs["values"] = values
	connectProps(s, cs)
	return &avroNode{kind: kPairs, key: key, elem: val}, cs, nil
}

// optional compiles the type of a field, an array's items or a map's
// values: a fresh Connect schema map (a named type used twice gets one
// map per use, since each use sets its own "field"), with "optional" true
// for a union with null.
func (c *avroCompiler) optional(s avro.Schema, depth int) (*avroNode, map[string]any, error) {
	n, cs, err := c.node(s, depth)
	if err != nil {
		return nil, nil, err
	}
	if cs == nil { // the null type alone
		cs = map[string]any{"type": "struct", "fields": []any{}}
	}
	out := make(map[string]any, len(cs)+2)
	for k, v := range cs {
		out[k] = v
	}
	if _, ok := out["optional"]; !ok {
		out["optional"] = n.kind == kNull
	}
	return n, out, nil
}

func (c *avroCompiler) union(s *avro.UnionSchema, cs map[string]any, depth int) (*avroNode, map[string]any, error) {
	if s.Nullable() {
		null, typ := s.Indices()
		elem, inner, err := c.node(s.Types()[typ], depth+1)
		if err != nil {
			return nil, nil, err
		}
		for k, v := range inner {
			cs[k] = v
		}
		cs["optional"] = true
		return &avroNode{kind: kNullable, elem: elem, null: int64(null)}, cs, nil
	}
	n := &avroNode{kind: kUnion}
	var fields []any
	optional := false
	for _, b := range s.Types() {
		if b.Type() == avro.Null {
			n.branches = append(n.branches, nil)
			n.names = append(n.names, "")
			optional = true
			continue
		}
		bn, bs, err := c.node(b, depth+1)
		if err != nil {
			return nil, nil, err
		}
		name := string(b.Type())
		if named, ok := deref(b).(avro.NamedSchema); ok {
			name = named.Name()
		}
		f := make(map[string]any, len(bs)+2)
		for k, v := range bs {
			f[k] = v
		}
		f["optional"] = true
		f["field"] = name
		fields = append(fields, f)
		n.branches = append(n.branches, bn)
		n.names = append(n.names, name)
	}
	cs["type"] = "struct"
	cs["name"] = avroUnion
	cs["fields"] = fields
	cs["optional"] = optional
	return n, cs, nil
}

// decode implements format.
func (f *avroFormat) decode(body []byte) (any, map[string]any, error) {
	d := avroDecoders.Get().(*avroDecoder)
	defer func() {
		d.r.Reset(nil) // keep no record alive from the pool
		d.slab = nil
		avroDecoders.Put(d)
	}()
	d.r.Reset(body)
	d.r.Error = nil
	d.size = len(body)
	d.slab = make([]byte, 0, len(body))
	d.err = nil
	v := d.read(f.root)
	if d.err == nil && d.r.Error != nil {
		d.err = d.r.Error
	}
	if d.err == nil {
		if d.r.Peek(); d.r.Error == nil {
			d.err = errors.New("bytes left after the record: it was not written with this schema")
		}
	}
	if d.err != nil {
		if errors.Is(d.err, io.EOF) || errors.Is(d.err, io.ErrUnexpectedEOF) {
			return nil, nil, errors.New("avro: the record ends early: it was not written with this schema")
		}
		return nil, nil, d.err
	}
	return v, f.connect, nil
}

var avroDecoders = sync.Pool{New: func() any { return &avroDecoder{r: avro.NewReader(nil, 0)} }}

// avroDecoder is the state of one decode: hamba's Reader for the
// primitives and a slab for every string of the record, sized to the
// record so that no length read from corrupt bytes allocates more than the
// record itself.
type avroDecoder struct {
	r       *avro.Reader
	size    int
	slab    []byte
	scratch []byte
	err     error
}

func (d *avroDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("avro: "+format, args...)
	}
}

// raw reads n bytes into the scratch buffer, valid until the next call.
func (d *avroDecoder) raw(n int) []byte {
	if n < 0 || n > d.size {
		d.fail("a length of %d bytes in a record of %d", n, d.size)
		return nil
	}
	if cap(d.scratch) < n {
		d.scratch = make([]byte, n)
	}
	b := d.scratch[:n]
	d.r.Read(b)
	return b
}

func (d *avroDecoder) str() string {
	n := int(d.r.ReadLong())
	if d.r.Error != nil {
		return ""
	}
	if n < 0 || n > d.size {
		d.fail("a string of %d bytes in a record of %d", n, d.size)
		return ""
	}
	if n == 0 {
		return ""
	}
	start := len(d.slab)
	d.slab = append(d.slab, make([]byte, n)...)
	b := d.slab[start : start+n : start+n]
	d.r.Read(b)
	if d.r.Error != nil {
		return ""
	}
	if !utf8.Valid(b) {
		d.fail("a string is not valid UTF-8")
		return ""
	}
	// The slab is only ever appended to, so b never changes again.
	return unsafe.String(&b[0], n)
}

func floatValue(f float64, bits int) any {
	switch {
	case math.IsNaN(f):
		return "NaN" // as JsonConverter (Jackson) writes them
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return json.Number(strconv.FormatFloat(f, 'g', -1, bits))
}

// count reads an array or map block header, refusing a count that the
// rest of the record could not hold.
func (d *avroDecoder) count() int {
	n, _ := d.r.ReadBlockHeader()
	if n < 0 || (n > int64(d.size) && n > 4096) {
		d.fail("a block of %d items in a record of %d bytes", n, d.size)
		return 0
	}
	return int(n)
}

func (d *avroDecoder) read(n *avroNode) any {
	if d.err != nil || d.r.Error != nil {
		return nil
	}
	switch n.kind {
	case kNull:
		return nil
	case kBoolean:
		return d.r.ReadBool()
	case kInt:
		return json.Number(strconv.FormatInt(int64(d.r.ReadInt()), 10))
	case kLong:
		return json.Number(strconv.FormatInt(d.r.ReadLong(), 10))
	case kFloat:
		return floatValue(float64(d.r.ReadFloat()), 32)
	case kDouble:
		return floatValue(d.r.ReadDouble(), 64)
	case kString:
		return d.str()
	case kBytes:
		return base64.StdEncoding.EncodeToString(d.raw(int(d.r.ReadLong())))
	case kFixed:
		return base64.StdEncoding.EncodeToString(d.raw(n.size))
	case kEnum:
		i := d.r.ReadInt()
		if i < 0 || int(i) >= len(n.symbols) {
			d.fail("enum index %d of %d symbols", i, len(n.symbols))
			return nil
		}
		return n.symbols[i]
	case kRecord:
		m := make(map[string]any, len(n.fields))
		for _, f := range n.fields {
			m[f.name] = d.read(f.node)
		}
		return m
	case kNullable:
		i := d.r.ReadLong()
		switch {
		case i == n.null:
			return nil
		case i == 1-n.null:
			return d.read(n.elem)
		}
		d.fail("union index %d of 2 branches", i)
		return nil
	case kUnion:
		i := d.r.ReadLong()
		if i < 0 || i >= int64(len(n.branches)) {
			d.fail("union index %d of %d branches", i, len(n.branches))
			return nil
		}
		if n.branches[i] == nil {
			return nil
		}
		m := make(map[string]any, len(n.branches))
		for _, name := range n.names {
			if name != "" {
				m[name] = nil
			}
		}
		m[n.names[i]] = d.read(n.branches[i])
		return m
	case kArray:
		out := []any{}
		for c := d.count(); c > 0 && d.err == nil && d.r.Error == nil; c = d.count() {
			for range c {
				out = append(out, d.read(n.elem))
			}
		}
		return out
	case kMap:
		out := map[string]any{}
		for c := d.count(); c > 0 && d.err == nil && d.r.Error == nil; c = d.count() {
			for range c {
				k := d.str()
				out[k] = d.read(n.elem)
			}
		}
		return out
	case kPairs:
		out := []any{}
		for c := d.count(); c > 0 && d.err == nil && d.r.Error == nil; c = d.count() {
			for range c {
				k := d.read(n.key)
				out = append(out, []any{k, d.read(n.elem)})
			}
		}
		return out
	}
	d.fail("unknown node")
	return nil
}
