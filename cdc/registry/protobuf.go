package registry

// Protobuf records, as Confluent's ProtobufConverter writes them, decoded to
// what JsonConverter (schemas.enable=true) writes for the same Connect
// record. The Connect ↔ Protobuf mapping is the one of Confluent's
// ProtobufData (io.confluent.connect.protobuf.ProtobufData, the converter's
// core), read in the direction of its toConnectSchema and toConnectData:
//
//	Protobuf                                  Connect (JsonConverter's form)
//	int32, sint32, sfixed32                   int32 (int8/int16 when the field's
//	                                          (confluent.field_meta).params
//	                                          say connect.type int8/int16)
//	int64, sint64, sfixed64                   int64
//	uint32, fixed32                           int64 (the unsigned value)
//	uint64, fixed64                           int64 (the bits read as signed, as
//	                                          ProtobufData's Java long does)
//	float, double                             float32, float64 (JsonConverter's
//	                                          "float" and "double"; numbers
//	                                          written as Java's
//	                                          Float/Double.toString)
//	bool, string                              boolean, string
//	bytes                                     bytes (a base64 string)
//	enum                                      string, the value's name; named
//	                                          after the enum, with ProtobufData's
//	                                          io.confluent.connect.protobuf.Enum
//	                                          parameters
//	message                                   struct, fields in field order,
//	                                          named after the message's full
//	                                          name (ProtobufData's
//	                                          enhanced.protobuf.schema.support:
//	                                          Debezium's names end in
//	                                          ".Envelope", ".Key" after a
//	                                          namespace); no version, which
//	                                          ProtobufData takes from the
//	                                          registry
//	oneof o (not a proto3 optional)           struct field "o_<index>" named
//	                                          io.confluent.connect.protobuf.Union.o,
//	                                          one optional field per member
//	repeated T                                array of T
//	map<K, V> (or a repeated *Entry message   map; JsonConverter writes string
//	with fields key and value)                keys as an object, others as
//	                                          [[key, value], …] pairs
//	google.protobuf.{Int32,Int64,UInt32,      the wrapped scalar, optional
//	UInt64,Float,Double,Bool,String,Bytes}    (ProtobufConverter's
//	Value                                     wrapper.for.nullables); as the
//	                                          record's message, the bare
//	                                          primitive record
//	                                          (wrapper.for.raw.primitives)
//	confluent.type.Decimal                    org.apache.kafka.connect.data.Decimal
//	                                          (bytes, parameters scale and
//	                                          connect.decimal.precision from the
//	                                          field's params scale and precision)
//	google.type.Date                          org.apache.kafka.connect.data.Date
//	                                          (int32 days since the epoch)
//	google.type.TimeOfDay                     org.apache.kafka.connect.data.Time
//	                                          (int32 milliseconds of the day)
//	google.protobuf.Timestamp                 org.apache.kafka.connect.data.Timestamp
//	                                          (int64 milliseconds since the epoch)
//
// Presence and optional fields. Protobuf cannot tell an unset proto3 scalar
// from its zero value, so a scalar without presence is a required Connect
// field and decodes to its zero value when unset (0, "", false), as
// ProtobufData gives; an enum is optional, as ProtobufData makes it, and
// decodes to its first value's name when unset. A field with presence
// (proto3 optional, proto2 optional, a wrapper, a message) is optional and
// decodes to null when unset: the converter writes optional Connect fields that way
// (optional.for.nullables, wrapper.for.nullables). A repeated field has no
// presence: an unset one is an empty array, as ProtobufData gives (it writes
// a null array as no elements). ProtobufConverter's defaults write every
// optional Connect scalar as a plain proto3 field, so a null column reads
// back as 0 or "": configure the converter with optional.for.nullables=true
// (or wrapper.for.nullables=true) to keep nulls.
//
// Connect names and parameters. ProtobufData keeps no Connect schema name
// other than the four logical types above and no parameters other than
// connect.type, precision and scale: a Debezium semantic type such as
// io.debezium.time.Date (an int32), io.debezium.time.MicroTimestamp (an
// int64), io.debezium.data.Json or Uuid (strings), io.debezium.data.Bits
// (bytes) or io.debezium.data.VariableScaleDecimal (a struct {scale, value})
// reaches a ProtobufConverter consumer as its bare type. Debezium's
// time.precision.mode=connect and decimal.handling.mode=precise give the
// Connect logical types instead, which survive. To carry the rest, this
// decoder also reads ragsync's own keys in Confluent's meta options
// (confluent/meta.proto, (confluent.field_meta) and (confluent.message_meta),
// their params map), in the spirit of AvroData's connect.* properties:
//
//	connect.name               the Connect schema name ("" for none)
//	connect.version            the Connect schema version
//	connect.parameters.<key>   a Connect schema parameter
//	connect.default            the default value, as JSON
//	connect.optional           "true" or "false", overriding the rule above
//	connect.field              the Connect field name, when it is not a
//	                           valid Protobuf field name
//	connect.items.<key>,       the same keys for an array's items and a
//	connect.keys.<key>,        map's keys and values (for example
//	connect.values.<key>       connect.items.name)
//
// On a message field, field_meta describes the field; message_meta on the
// message describes the struct wherever it is used. ProtobufConverter does
// not write these keys: a schema carries them when it is registered ahead
// of the connector (auto.register.schemas=false, use.latest.version=true)
// by a tool that knows them, as this package's test encoder does. Without
// them a Debezium type decodes as its bare type, as a Java consumer sees
// it. ProtobufData ignores the keys, so a schema that carries them reads
// the same for a Java consumer, and every other option (or an unknown key)
// is ignored here.
// ProtobufData's io.confluent.connect.protobuf.Tag parameter (the field
// number) is left out: it is Protobuf bookkeeping that JsonConverter's
// consumers have no use for, and it would differ from the JSON converter's
// schema of the same record.

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/big"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// ProtobufData's names.
const (
	pbEnumParam   = "io.confluent.connect.protobuf.Enum"
	pbUnionPrefix = "io.confluent.connect.protobuf.Union."
	// pbMetaNumber is the extension number of confluent.field_meta and
	// confluent.message_meta (confluent/meta.proto).
	pbMetaNumber = 1088
	// pbMaxIndexes bounds the message-index path of a record: a message
	// nested deeper than this is not a schema anyone registers.
	pbMaxIndexes = 64
)

// pbSchemaFile is the name the registered schema is compiled under; its
// imports are resolved from the references, then from the files every
// Confluent deployment knows (pbKnownFiles and protoc's standard imports).
const pbSchemaFile = "registered-schema.proto"

// pbKnownFiles are the files that Confluent's Protobuf serializers import
// without registering them as references, beside protoc's standard
// google/protobuf ones.
var pbKnownFiles = map[string]string{
	"confluent/meta.proto": `syntax = "proto3";
package confluent;
import "google/protobuf/descriptor.proto";
message Meta {
  string doc = 1;
  map<string, string> params = 2;
  repeated string tags = 3;
  repeated Rule rules = 4;
}
message Rule {
  string name = 1;
  string doc = 2;
  string expr = 3;
  string sql = 4;
}
extend google.protobuf.FileOptions { Meta file_meta = 1088; }
extend google.protobuf.MessageOptions { Meta message_meta = 1088; }
extend google.protobuf.FieldOptions { Meta field_meta = 1088; }
extend google.protobuf.EnumOptions { Meta enum_meta = 1088; }
extend google.protobuf.EnumValueOptions { Meta enum_value_meta = 1088; }
`,
	"confluent/type/decimal.proto": `syntax = "proto3";
package confluent.type;
message Decimal {
  bytes value = 1;
  uint32 precision = 2;
  int32 scale = 3;
}
`,
	"google/type/date.proto": `syntax = "proto3";
package google.type;
message Date {
  int32 year = 1;
  int32 month = 2;
  int32 day = 3;
}
`,
	"google/type/timeofday.proto": `syntax = "proto3";
package google.type;
message TimeOfDay {
  int32 hours = 1;
  int32 minutes = 2;
  int32 seconds = 3;
  int32 nanos = 4;
}
`,
}

// compileProtobufFile compiles a registered .proto source with its
// references (import name → source) into its file descriptor.
func compileProtobufFile(text string, refs map[string]string) (protoreflect.FileDescriptor, error) {
	var missing []string
	var mu sync.Mutex
	access := func(path string) (io.ReadCloser, error) {
		if path == pbSchemaFile {
			return io.NopCloser(strings.NewReader(text)), nil
		}
		if src, ok := refs[path]; ok {
			return io.NopCloser(strings.NewReader(src)), nil
		}
		if src, ok := pbKnownFiles[path]; ok {
			return io.NopCloser(strings.NewReader(src)), nil
		}
		mu.Lock()
		missing = append(missing, path)
		mu.Unlock()
		return nil, fmt.Errorf("%s: %w", path, os.ErrNotExist)
	}
	c := protocompile.Compiler{
		Resolver:       protocompile.WithStandardImports(&protocompile.SourceResolver{Accessor: access}),
		MaxParallelism: 1,
	}
	files, err := c.Compile(context.Background(), pbSchemaFile)
	if err != nil {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range missing {
			if !strings.HasPrefix(m, "google/protobuf/") {
				return nil, fmt.Errorf("compile protobuf schema: import %q is neither among the schema's references nor a well-known file; register it as a reference: %w", m, err)
			}
		}
		return nil, fmt.Errorf("compile protobuf schema: %w", err)
	}
	return files[0], nil
}

// compileProtobuf compiles a schema registered as PROTOBUF (text is the
// .proto source, refs the referenced files by import name) into the format
// that decodes its records. Messages are prepared when a record first
// names them, so a file whose other messages cannot map to Connect (a
// recursive message) still decodes the ones that can.
func compileProtobuf(text string, refs map[string]string) (format, error) {
	fd, err := compileProtobufFile(text, refs)
	if err != nil {
		return nil, err
	}
	if fd.Messages().Len() == 0 {
		return nil, fmt.Errorf("compile protobuf schema: the file defines no message")
	}
	return &protobufFormat{file: fd, plans: map[protoreflect.FullName]*pbPlan{}}, nil
}

// protobufFormat decodes the records of one registered .proto file. It is
// safe for concurrent use. The Connect schema it returns is shared by
// every record of the same message: callers read it and never change it.
type protobufFormat struct {
	file protoreflect.FileDescriptor

	mu    sync.Mutex
	plans map[protoreflect.FullName]*pbPlan
}

// pbPlan is a message's Connect schema and the conversion of its values,
// or the reason it has none.
type pbPlan struct {
	// node converts the record's message: a struct, or the value of a
	// wrapper message that stands for a primitive record.
	node   *pbNode
	schema map[string]any
	err    error
}

func (f *protobufFormat) decode(body []byte) (any, map[string]any, error) {
	md, rest, err := f.messageAt(body)
	if err != nil {
		return nil, nil, err
	}
	p := f.plan(md)
	if p.err != nil {
		return nil, nil, p.err
	}
	m := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(rest, m); err != nil {
		return nil, nil, fmt.Errorf("decode protobuf %s: %w", md.FullName(), err)
	}
	v, err := p.node.value(protoreflect.ValueOfMessage(m))
	if err != nil {
		return nil, nil, fmt.Errorf("decode protobuf %s: %w", md.FullName(), err)
	}
	return v, p.schema, nil
}

// messageAt reads the message indexes that start a record in Confluent's
// Protobuf wire format (a zigzag varint count, then that many zigzag
// varints: the path of the record's message type among the file's
// messages and their nested messages; a count of 0 alone means [0]) and
// returns the message type and the bytes after the indexes.
func (f *protobufFormat) messageAt(body []byte) (protoreflect.MessageDescriptor, []byte, error) {
	n, size := binary.Varint(body)
	if size <= 0 {
		return nil, nil, fmt.Errorf("decode protobuf: the message indexes are cut short")
	}
	body = body[size:]
	if n < 0 || n > pbMaxIndexes {
		return nil, nil, fmt.Errorf("decode protobuf: %d message indexes (want 0 to %d)", n, pbMaxIndexes)
	}
	path := []int64{0}
	if n > 0 {
		path = make([]int64, n)
		for i := range path {
			path[i], size = binary.Varint(body)
			if size <= 0 {
				return nil, nil, fmt.Errorf("decode protobuf: the message indexes are cut short")
			}
			body = body[size:]
		}
	}
	msgs := f.file.Messages()
	var md protoreflect.MessageDescriptor
	for depth, i := range path {
		if i < 0 || i >= int64(msgs.Len()) {
			return nil, nil, fmt.Errorf("decode protobuf: message index %v: no message %d at depth %d (the schema has %d there)", path, i, depth, msgs.Len())
		}
		md = msgs.Get(int(i))
		msgs = md.Messages()
	}
	return md, body, nil
}

// plan returns the prepared plan of md, preparing it once.
func (f *protobufFormat) plan(md protoreflect.MessageDescriptor) *pbPlan {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.plans[md.FullName()]; ok {
		return p
	}
	p := &pbPlan{}
	if typ, ok := pbWrappers[md.FullName()]; ok {
		// ProtobufConverter writes a record that is a bare primitive (a
		// string key) as the primitive's wrapper message
		// (wrapper.for.raw.primitives, on by default).
		params := pbReadMeta(md.Options())
		if typ == "int32" {
			typ = pbIntType(params)
		}
		p.node = &pbNode{kind: pbWrapper, pk: md.Fields().ByNumber(1).Kind()}
		p.schema = map[string]any{"type": typ, "optional": false}
		if err := pbApplyMeta(p.schema, params, "connect."); err != nil {
			p.err = fmt.Errorf("protobuf message %s: %w", md.FullName(), err)
		}
	} else {
		msg, schema, err := pbCompileMessage(md, &pbCompiler{active: map[protoreflect.FullName]bool{}, done: map[protoreflect.FullName]pbCompiled{}})
		if err != nil {
			p.err = fmt.Errorf("protobuf message %s: %w", md.FullName(), err)
		}
		p.node, p.schema = &pbNode{kind: pbStruct, msg: msg}, schema
	}
	f.plans[md.FullName()] = p
	return p
}

// pbKind is how a Protobuf value becomes a Connect value.
type pbKind int

const (
	pbScalar pbKind = iota
	pbEnum
	pbWrapper
	pbDecimal
	pbDate
	pbTimeOfDay
	pbTimestamp
	pbStruct
	pbList
	pbMap
)

// pbNode converts one Protobuf value (a field's value, an element, a map
// key or value) to its Connect value in JsonConverter's form.
type pbNode struct {
	kind pbKind
	// pk is the Protobuf kind of a scalar (or the wrapped scalar).
	pk protoreflect.Kind
	// msg is the struct of a pbStruct.
	msg *pbMessage
	// elem is the element of a pbList and the value of a pbMap; key is a
	// pbMap's key.
	elem, key *pbNode
	// stringKeys says that JsonConverter writes the map as an object.
	stringKeys bool
	// enum is the enum of a pbEnum.
	enum protoreflect.EnumDescriptor
	// scale is a pbDecimal's Connect scale.
	scale int32
}

// pbMessage is a message read as a Connect struct.
type pbMessage struct {
	fields []pbField
}

// pbField is one Connect field of a struct: a Protobuf field, or a oneof
// read as ProtobufData's union struct.
type pbField struct {
	name     string
	fd       protoreflect.FieldDescriptor
	node     *pbNode
	presence bool // unset reads as null
	oneof    protoreflect.OneofDescriptor
	members  []pbField // a oneof's members
}

// pbCompiler holds what building one message's plan has seen.
type pbCompiler struct {
	// active are the messages being built, to refuse a recursive message,
	// which has no Connect schema.
	active map[protoreflect.FullName]bool
	// done are the messages built, each once however many fields use it:
	// a message whose fields use another twice, down many levels, would
	// otherwise take exponential time.
	done map[protoreflect.FullName]pbCompiled
}

type pbCompiled struct {
	msg    *pbMessage
	schema map[string]any
}

// pbCompileMessage builds the Connect struct schema of md and its value
// conversion. The schema is shared by every use of the message: callers
// copy it before changing it.
func pbCompileMessage(md protoreflect.MessageDescriptor, seen *pbCompiler) (*pbMessage, map[string]any, error) {
	if c, ok := seen.done[md.FullName()]; ok {
		return c.msg, c.schema, nil
	}
	if seen.active[md.FullName()] {
		return nil, nil, fmt.Errorf("message %s contains itself, which a Connect schema cannot describe", md.FullName())
	}
	seen.active[md.FullName()] = true
	defer delete(seen.active, md.FullName())

	msg := &pbMessage{}
	var fields []any
	// ProtobufData lists the oneofs first, then the other fields.
	oneofs := md.Oneofs()
	for i := 0; i < oneofs.Len(); i++ {
		od := oneofs.Get(i)
		if od.IsSynthetic() {
			continue // a proto3 optional field
		}
		f := pbField{name: fmt.Sprintf("%s_%d", od.Name(), od.Index()), oneof: od, presence: true}
		var members []any
		for j := 0; j < od.Fields().Len(); j++ {
			mf, ms, err := pbCompileField(od.Fields().Get(j), seen)
			if err != nil {
				return nil, nil, err
			}
			mf.presence = true
			ms["optional"] = true
			f.members = append(f.members, mf)
			members = append(members, ms)
		}
		msg.fields = append(msg.fields, f)
		fields = append(fields, map[string]any{
			"type": "struct", "optional": true, "name": pbUnionPrefix + string(od.Name()),
			"fields": members, "field": f.name,
		})
	}
	for i := 0; i < md.Fields().Len(); i++ {
		fd := md.Fields().Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			continue
		}
		f, fs, err := pbCompileField(fd, seen)
		if err != nil {
			return nil, nil, err
		}
		msg.fields = append(msg.fields, f)
		fields = append(fields, fs)
	}
	if fields == nil {
		fields = []any{}
	}
	schema := map[string]any{"type": "struct", "optional": false, "name": string(md.FullName()), "fields": fields}
	if err := pbApplyMeta(schema, pbReadMeta(md.Options()), "connect."); err != nil {
		return nil, nil, fmt.Errorf("message %s: %w", md.FullName(), err)
	}
	seen.done[md.FullName()] = pbCompiled{msg, schema}
	return msg, schema, nil
}

// pbCompileField builds a struct field: its conversion and its Connect
// schema with "field" set.
func pbCompileField(fd protoreflect.FieldDescriptor, seen *pbCompiler) (pbField, map[string]any, error) {
	params := pbReadMeta(fd.Options())
	name := string(fd.Name())
	if n, ok := params["connect.field"]; ok && n != "" {
		name = n
	}
	f := pbField{name: name, fd: fd}
	fail := func(err error) (pbField, map[string]any, error) {
		return pbField{}, nil, fmt.Errorf("field %s: %w", fd.FullName(), err)
	}
	var schema map[string]any
	var err error
	switch {
	case fd.IsMap():
		f.node, schema, err = pbCompileMap(fd.MapKey(), fd.MapValue(), params, seen)
	case fd.IsList() && fd.Kind() == protoreflect.MessageKind && pbIsMapEntry(fd.Message()):
		// A repeated *Entry message with fields key and value is a map to
		// ProtobufData, declared with map<> or not.
		f.node, schema, err = pbCompileMap(fd.Message().Fields().Get(0), fd.Message().Fields().Get(1), params, seen)
	case fd.IsList():
		var elem *pbNode
		var items map[string]any
		elem, items, err = pbCompileValue(fd, params, seen)
		if err == nil {
			items["optional"] = true
			err = pbApplyMeta(items, params, "connect.items.")
		}
		f.node = &pbNode{kind: pbList, elem: elem}
		schema = map[string]any{"type": "array", "optional": true, "items": items}
	default:
		f.node, schema, err = pbCompileValue(fd, params, seen)
		if err == nil {
			// A proto2 required field is always there (Unmarshal checks
			// it); ProtobufData makes every enum optional.
			f.presence = fd.HasPresence() && fd.Cardinality() != protoreflect.Required
			schema["optional"] = f.presence || f.node.kind == pbEnum
		}
	}
	if err != nil {
		return fail(err)
	}
	if err := pbApplyMeta(schema, params, "connect."); err != nil {
		return fail(err)
	}
	schema["field"] = name
	return f, schema, nil
}

// pbCompileMap builds a map field from its entry's key and value fields.
func pbCompileMap(kd, vd protoreflect.FieldDescriptor, params map[string]string, seen *pbCompiler) (*pbNode, map[string]any, error) {
	key, ks, err := pbCompileValue(kd, nil, seen)
	if err != nil {
		return nil, nil, err
	}
	ks["optional"] = false
	val, vs, err := pbCompileValue(vd, nil, seen)
	if err != nil {
		return nil, nil, err
	}
	vs["optional"] = val.kind != pbScalar
	if err := pbApplyMeta(ks, params, "connect.keys."); err != nil {
		return nil, nil, err
	}
	if err := pbApplyMeta(vs, params, "connect.values."); err != nil {
		return nil, nil, err
	}
	// JsonConverter writes a map with string keys as an object, any
	// other as pairs.
	n := &pbNode{kind: pbMap, key: key, elem: val, stringKeys: ks["type"] == "string"}
	return n, map[string]any{"type": "map", "optional": true, "keys": ks, "values": vs}, nil
}

// pbIsMapEntry reports ProtobufData's test for a map entry message.
func pbIsMapEntry(md protoreflect.MessageDescriptor) bool {
	fs := md.Fields()
	return strings.HasSuffix(string(md.Name()), "Entry") && fs.Len() == 2 &&
		fs.Get(0).Name() == "key" && fs.Get(1).Name() == "value" &&
		!fs.Get(0).IsList() && !fs.Get(1).IsList()
}

// pbCompileValue builds the conversion and Connect schema (without
// "optional" and "field", which the caller sets) of one value of fd's
// type, ignoring whether fd is repeated. params are fd's meta params, for
// connect.type and a Decimal's precision and scale.
func pbCompileValue(fd protoreflect.FieldDescriptor, params map[string]string, seen *pbCompiler) (*pbNode, map[string]any, error) {
	switch k := fd.Kind(); k {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return &pbNode{pk: k}, map[string]any{"type": pbIntType(params)}, nil
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return &pbNode{pk: k}, map[string]any{"type": "int64"}, nil
	case protoreflect.FloatKind:
		return &pbNode{pk: k}, map[string]any{"type": "float"}, nil
	case protoreflect.DoubleKind:
		return &pbNode{pk: k}, map[string]any{"type": "double"}, nil
	case protoreflect.BoolKind:
		return &pbNode{pk: k}, map[string]any{"type": "boolean"}, nil
	case protoreflect.StringKind:
		return &pbNode{pk: k}, map[string]any{"type": "string"}, nil
	case protoreflect.BytesKind:
		return &pbNode{pk: k}, map[string]any{"type": "bytes"}, nil
	case protoreflect.EnumKind:
		ed := fd.Enum()
		ps := map[string]any{pbEnumParam: string(ed.Name())}
		for i := 0; i < ed.Values().Len(); i++ {
			v := ed.Values().Get(i)
			ps[pbEnumParam+"."+string(v.Name())] = strconv.Itoa(int(v.Number()))
		}
		return &pbNode{kind: pbEnum, enum: ed}, map[string]any{"type": "string", "name": string(ed.Name()), "parameters": ps}, nil
	case protoreflect.MessageKind:
		return pbCompileMessageValue(fd.Message(), params, seen)
	default:
		return nil, nil, fmt.Errorf("%s fields have no Connect type", k)
	}
}

// pbIntType is the Connect type of a 32-bit integer field: ProtobufData
// records int8 and int16 as connect.type.
func pbIntType(params map[string]string) string {
	switch params["connect.type"] {
	case "int8":
		return "int8"
	case "int16":
		return "int16"
	}
	return "int32"
}

// pbWrappers are the wrapper messages and the Connect type of the value
// they wrap.
var pbWrappers = map[protoreflect.FullName]string{
	"google.protobuf.DoubleValue": "double",
	"google.protobuf.FloatValue":  "float",
	"google.protobuf.Int64Value":  "int64",
	"google.protobuf.UInt64Value": "int64",
	"google.protobuf.Int32Value":  "int32",
	"google.protobuf.UInt32Value": "int64",
	"google.protobuf.BoolValue":   "boolean",
	"google.protobuf.StringValue": "string",
	"google.protobuf.BytesValue":  "bytes",
}

// pbCompileMessageValue builds a message-typed value: a logical type, a
// wrapper or a struct.
func pbCompileMessageValue(md protoreflect.MessageDescriptor, params map[string]string, seen *pbCompiler) (*pbNode, map[string]any, error) {
	logical := func(kind pbKind, typ, name string) (*pbNode, map[string]any, error) {
		return &pbNode{kind: kind}, map[string]any{"type": typ, "name": name, "version": json.Number("1")}, nil
	}
	switch md.FullName() {
	case "confluent.type.Decimal":
		scale, err := strconv.ParseInt(params["scale"], 10, 32)
		if err != nil {
			scale = 0 // ProtobufData's default
		}
		n, s, _ := logical(pbDecimal, "bytes", connectDecimal)
		n.scale = int32(scale)
		ps := map[string]any{"scale": strconv.Itoa(int(scale))}
		if p, err := strconv.Atoi(params["precision"]); err == nil {
			ps["connect.decimal.precision"] = strconv.Itoa(p)
		}
		s["parameters"] = ps
		return n, s, nil
	case "google.type.Date":
		return logical(pbDate, "int32", connectDate)
	case "google.type.TimeOfDay":
		return logical(pbTimeOfDay, "int32", connectTime)
	case "google.protobuf.Timestamp":
		return logical(pbTimestamp, "int64", connectTimestamp)
	}
	if typ, ok := pbWrappers[md.FullName()]; ok {
		if typ == "int32" {
			typ = pbIntType(params)
		}
		return &pbNode{kind: pbWrapper, pk: md.Fields().ByNumber(1).Kind()}, map[string]any{"type": typ}, nil
	}
	msg, schema, err := pbCompileMessage(md, seen)
	if err != nil {
		return nil, nil, err
	}
	// The message's schema is shared by every field of its type: copy it
	// before the field's own "optional", "field" and meta are set.
	s := make(map[string]any, len(schema)+2)
	for k, v := range schema {
		s[k] = v
	}
	return &pbNode{kind: pbStruct, msg: msg}, s, nil
}

// pbReadMeta returns the params of the Confluent meta option
// (field_meta, message_meta: extension 1088) in opts, or nil. It reads
// the option's bytes, so it works whether the compiler kept the extension
// as a known field or as unknown bytes, and ignores every other option.
func pbReadMeta(opts proto.Message) map[string]string {
	if opts == nil {
		return nil
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(opts)
	if err != nil {
		return nil
	}
	var params map[string]string
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return params
		}
		b = b[n:]
		if num == pbMetaNumber && typ == protowire.BytesType {
			meta, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return params
			}
			params = pbMetaParams(meta, params)
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return params
		}
		b = b[n:]
	}
	return params
}

// pbMetaParams adds the params map (field 2 of confluent.Meta) of meta to
// params.
func pbMetaParams(meta []byte, params map[string]string) map[string]string {
	for len(meta) > 0 {
		num, typ, n := protowire.ConsumeTag(meta)
		if n < 0 {
			return params
		}
		meta = meta[n:]
		if num == 2 && typ == protowire.BytesType {
			entry, n := protowire.ConsumeBytes(meta)
			if n < 0 {
				return params
			}
			meta = meta[n:]
			var k, v string
			for len(entry) > 0 {
				enum, etyp, n := protowire.ConsumeTag(entry)
				if n < 0 {
					break
				}
				entry = entry[n:]
				if etyp == protowire.BytesType && (enum == 1 || enum == 2) {
					s, n := protowire.ConsumeString(entry)
					if n < 0 {
						break
					}
					if enum == 1 {
						k = s
					} else {
						v = s
					}
					entry = entry[n:]
					continue
				}
				n = protowire.ConsumeFieldValue(enum, etyp, entry)
				if n < 0 {
					break
				}
				entry = entry[n:]
			}
			if params == nil {
				params = map[string]string{}
			}
			params[k] = v
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, meta)
		if n < 0 {
			return params
		}
		meta = meta[n:]
	}
	return params
}

// pbApplyMeta applies ragsync's connect.* meta keys under prefix (such as
// "connect." or "connect.items.") to the Connect schema s.
func pbApplyMeta(s map[string]any, params map[string]string, prefix string) error {
	for k, v := range params {
		attr, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		switch {
		case attr == "name":
			if v == "" {
				delete(s, "name")
			} else {
				s["name"] = v
			}
		case attr == "version":
			if _, err := strconv.Atoi(v); err != nil {
				return fmt.Errorf("meta %s: %q is not an integer", k, v)
			}
			s["version"] = json.Number(v)
		case attr == "optional":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("meta %s: %q is not true or false", k, v)
			}
			s["optional"] = b
		case attr == "default":
			d := json.NewDecoder(strings.NewReader(v))
			d.UseNumber()
			var dv any
			if err := d.Decode(&dv); err != nil {
				return fmt.Errorf("meta %s: not JSON: %w", k, err)
			}
			s["default"] = dv
		case strings.HasPrefix(attr, "parameters."):
			ps, _ := s["parameters"].(map[string]any)
			if ps == nil {
				ps = map[string]any{}
				s["parameters"] = ps
			}
			ps[strings.TrimPrefix(attr, "parameters.")] = v
		}
	}
	return nil
}

// value converts a message to its Connect struct value.
func (pm *pbMessage) value(m protoreflect.Message) (map[string]any, error) {
	out := make(map[string]any, len(pm.fields))
	for _, f := range pm.fields {
		if f.oneof != nil {
			set := m.WhichOneof(f.oneof)
			if set == nil {
				out[f.name] = nil
				continue
			}
			u := make(map[string]any, len(f.members))
			for _, mf := range f.members {
				if mf.fd == set {
					v, err := mf.node.value(m.Get(set))
					if err != nil {
						return nil, fmt.Errorf("%s: %w", mf.name, err)
					}
					u[mf.name] = v
				} else {
					u[mf.name] = nil
				}
			}
			out[f.name] = u
			continue
		}
		if f.presence && !m.Has(f.fd) {
			out[f.name] = nil
			continue
		}
		v, err := f.node.value(m.Get(f.fd))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
		out[f.name] = v
	}
	return out, nil
}

// value converts one Protobuf value to its Connect value.
func (n *pbNode) value(v protoreflect.Value) (any, error) {
	switch n.kind {
	case pbScalar:
		return pbScalarValue(n.pk, v), nil
	case pbEnum:
		num := v.Enum()
		if ev := n.enum.Values().ByNumber(num); ev != nil {
			return string(ev.Name()), nil
		}
		// Java's name for a value an open enum does not declare.
		return fmt.Sprintf("UNKNOWN_ENUM_VALUE_%s_%d", n.enum.Name(), num), nil
	case pbWrapper:
		m := v.Message()
		return pbScalarValue(n.pk, m.Get(m.Descriptor().Fields().ByNumber(1))), nil
	case pbDecimal:
		return pbDecimalValue(v.Message(), n.scale)
	case pbDate:
		return pbDateValue(v.Message())
	case pbTimeOfDay:
		return pbTimeOfDayValue(v.Message())
	case pbTimestamp:
		m := v.Message()
		fs := m.Descriptor().Fields()
		sec, nanos := m.Get(fs.ByNumber(1)).Int(), m.Get(fs.ByNumber(2)).Int()
		if nanos < 0 || nanos > 999_999_999 || sec > math.MaxInt64/1000-1 || sec < math.MinInt64/1000+1 {
			return nil, fmt.Errorf("google.protobuf.Timestamp %ds %dns is out of range", sec, nanos)
		}
		return json.Number(strconv.FormatInt(sec*1000+nanos/1_000_000, 10)), nil
	case pbStruct:
		return n.msg.value(v.Message())
	case pbList:
		l := v.List()
		out := make([]any, l.Len())
		for i := range out {
			e, err := n.elem.value(l.Get(i))
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = e
		}
		return out, nil
	case pbMap:
		return n.mapValue(v)
	}
	return nil, fmt.Errorf("no conversion for this value")
}

// mapValue converts a map (a map<> field or a list of entries) to
// JsonConverter's form: an object for string keys, else [[key, value], …]
// pairs ordered by key.
func (n *pbNode) mapValue(v protoreflect.Value) (any, error) {
	type entry struct {
		k protoreflect.MapKey
		v protoreflect.Value
	}
	var entries []entry
	if l, ok := v.Interface().(protoreflect.List); ok {
		for i := 0; i < l.Len(); i++ {
			m := l.Get(i).Message()
			fs := m.Descriptor().Fields()
			entries = append(entries, entry{m.Get(fs.Get(0)).MapKey(), m.Get(fs.Get(1))})
		}
	} else {
		v.Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
			entries = append(entries, entry{k, v})
			return true
		})
	}
	if n.stringKeys {
		out := make(map[string]any, len(entries))
		for _, e := range entries {
			ev, err := n.elem.value(e.v)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", e.k.String(), err)
			}
			out[e.k.String()] = ev
		}
		return out, nil
	}
	sortMapKeys(entries, func(e entry) protoreflect.MapKey { return e.k })
	out := make([]any, 0, len(entries))
	for _, e := range entries {
		kv, err := n.key.value(e.k.Value())
		if err != nil {
			return nil, err
		}
		ev, err := n.elem.value(e.v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.k.String(), err)
		}
		out = append(out, []any{kv, ev})
	}
	return out, nil
}

// sortMapKeys orders map entries by key (integers by value, false before
// true), so that pairs come out the same for the same map.
func sortMapKeys[E any](es []E, key func(E) protoreflect.MapKey) {
	slices.SortFunc(es, func(a, b E) int {
		ka, kb := key(a), key(b)
		switch x := ka.Interface().(type) {
		case int32, int64:
			return cmp.Compare(ka.Int(), kb.Int())
		case uint32, uint64:
			return cmp.Compare(ka.Uint(), kb.Uint())
		case bool:
			if x == kb.Bool() {
				return 0
			}
			if !x {
				return -1
			}
			return 1
		}
		return strings.Compare(ka.String(), kb.String())
	})
}

// pbScalarValue converts a scalar of Protobuf kind k.
func pbScalarValue(k protoreflect.Kind, v protoreflect.Value) any {
	switch k {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return json.Number(strconv.FormatInt(v.Int(), 10))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return json.Number(strconv.FormatUint(v.Uint(), 10))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		// ProtobufData hands the unsigned 64 bits to Connect as a Java
		// long: values past 2^63-1 read as negative.
		return json.Number(strconv.FormatInt(int64(v.Uint()), 10))
	case protoreflect.FloatKind:
		return javaFloat(v.Float(), 32)
	case protoreflect.DoubleKind:
		return javaFloat(v.Float(), 64)
	case protoreflect.BoolKind:
		return v.Bool()
	case protoreflect.StringKind:
		// Unmarshal checks proto3 strings; a proto2 string may hold any
		// bytes, which Java decodes with U+FFFD for what is not UTF-8.
		return strings.ToValidUTF8(v.String(), "\uFFFD")
	case protoreflect.BytesKind:
		return base64.StdEncoding.EncodeToString(v.Bytes())
	}
	return nil
}

// javaFloat writes a float as JsonConverter does (Jackson, with Java's
// Float.toString or Double.toString): the shortest digits that read back
// as the same value, at least one digit after the point, in scientific
// notation ("1.0E20", "1.5E-4") outside 10^-3 ≤ |f| < 10^7; NaN and the
// infinities as the strings Jackson quotes them as.
func javaFloat(f float64, bits int) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case f == 0:
		if math.Signbit(f) {
			return json.Number("-0.0")
		}
		return json.Number("0.0")
	}
	if a := math.Abs(f); a >= 1e-3 && a < 1e7 {
		s := strconv.FormatFloat(f, 'f', -1, bits)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
		return json.Number(s)
	}
	s := strconv.FormatFloat(f, 'e', -1, bits)
	mant, exp, _ := strings.Cut(s, "e")
	if !strings.Contains(mant, ".") {
		mant += ".0"
	}
	e, _ := strconv.Atoi(exp)
	return json.Number(mant + "E" + strconv.Itoa(e))
}

// pbDecimalValue converts confluent.type.Decimal to Connect's Decimal of
// the given scale in JsonConverter's form: the base64 of the unscaled
// value's minimal big-endian two's complement. A value of a smaller scale
// is rescaled exactly; one of a larger scale is refused, as Connect's
// Decimal refuses a BigDecimal whose scale is not the schema's.
func pbDecimalValue(m protoreflect.Message, scale int32) (any, error) {
	fs := m.Descriptor().Fields()
	raw := m.Get(fs.ByNumber(1)).Bytes()
	n := new(big.Int).SetBytes(raw)
	if len(raw) > 0 && raw[0]&0x80 != 0 {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(raw))))
	}
	if s := int32(m.Get(fs.ByNumber(3)).Int()); s != scale {
		if s > scale || scale-s > 1000 {
			return nil, fmt.Errorf("confluent.type.Decimal of scale %d does not fit the schema's scale %d", s, scale)
		}
		n.Mul(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale-s)), nil))
	}
	return base64.StdEncoding.EncodeToString(twosComplement(n)), nil
}

// twosComplement is Java's BigInteger.toByteArray: the minimal big-endian
// two's complement of n, at least one byte.
func twosComplement(n *big.Int) []byte {
	if n.Sign() >= 0 {
		b := n.Bytes()
		if len(b) == 0 || b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
		return b
	}
	// -n-1 has the complement bits of n.
	m := new(big.Int).Neg(n)
	m.Sub(m, big.NewInt(1))
	b := m.Bytes()
	if len(b) == 0 || b[0]&0x80 != 0 {
		b = append([]byte{0}, b...)
	}
	for i := range b {
		b[i] = ^b[i]
	}
	return b
}

// pbDateValue converts google.type.Date to days since the epoch; like
// ProtobufData's strict calendar, it refuses a date that does not exist
// (or a partial one: year, month or day 0).
func pbDateValue(m protoreflect.Message) (any, error) {
	fs := m.Descriptor().Fields()
	y, mo, d := m.Get(fs.ByNumber(1)).Int(), m.Get(fs.ByNumber(2)).Int(), m.Get(fs.ByNumber(3)).Int()
	t := time.Date(int(y), time.Month(mo), int(d), 0, 0, 0, 0, time.UTC)
	if y < 1 || y > 9999 || t.Year() != int(y) || t.Month() != time.Month(mo) || t.Day() != int(d) {
		return nil, fmt.Errorf("google.type.Date %04d-%02d-%02d is not a date", y, mo, d)
	}
	return json.Number(strconv.FormatInt(t.Unix()/86400, 10)), nil
}

// pbTimeOfDayValue converts google.type.TimeOfDay to milliseconds of the
// day (Connect's Time has millisecond precision).
func pbTimeOfDayValue(m protoreflect.Message) (any, error) {
	fs := m.Descriptor().Fields()
	h, mi, s, ns := m.Get(fs.ByNumber(1)).Int(), m.Get(fs.ByNumber(2)).Int(), m.Get(fs.ByNumber(3)).Int(), m.Get(fs.ByNumber(4)).Int()
	if h < 0 || h > 23 || mi < 0 || mi > 59 || s < 0 || s > 59 || ns < 0 || ns > 999_999_999 {
		return nil, fmt.Errorf("google.type.TimeOfDay %02d:%02d:%02d.%09d is not a time of day", h, mi, s, ns)
	}
	return json.Number(strconv.FormatInt(((h*60+mi)*60+s)*1000+ns/1_000_000, 10)), nil
}
