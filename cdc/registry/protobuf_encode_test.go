package registry

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// encodeProtobuf writes a record as Confluent's ProtobufConverter would,
// given its Connect schema in JsonConverter's form and its value as the
// JSON parser's tree: the .proto source to register (schemaType
// "PROTOBUF") and the record's bytes after the five-byte header (the
// message indexes, then the message). It follows the mapping at the top
// of protobuf.go: optional scalars are proto3 optional fields
// (optional.for.nullables), structs nested messages, and what Protobuf
// alone loses (Debezium's type names, parameters, required structs) goes
// in (confluent.field_meta) and (confluent.message_meta) params.
//
// A record that no Protobuf converter could have written skips the test,
// saying why: a value that contradicts its schema (a string in an int32
// field), a null in a required scalar or in an array, an array of arrays,
// text that is not UTF-8. A null array is written as an empty one, as
// ProtobufData does, and reads back as [].
func encodeProtobuf(t testing.TB, connect map[string]any, payload any) (schemaType, schemaText string, body []byte) {
	t.Helper()
	if payload == nil {
		t.Skip("protobuf: a null value is a tombstone, which the serializer writes as no bytes")
	}
	g := &pbGen{t: t, imports: map[string]bool{}}
	if connect["type"] != "struct" {
		return g.primitive(connect, payload)
	}
	name, _ := connect["name"].(string)
	pkg, simple := pbSplitName(name)
	top := g.message(connect, simple, map[string]bool{})
	var b strings.Builder
	b.WriteString("syntax = \"proto3\";\n")
	if pkg != "" {
		fmt.Fprintf(&b, "package %s;\n", pkg)
	}
	imports := make([]string, 0, len(g.imports))
	for imp := range g.imports {
		imports = append(imports, imp)
	}
	sort.Strings(imports)
	for _, imp := range imports {
		fmt.Fprintf(&b, "import %q;\n", imp)
	}
	top.write(&b, "")
	schemaText = b.String()

	fd, err := compileProtobufFile(schemaText, nil)
	if err != nil {
		t.Fatalf("encodeProtobuf: the generated schema does not compile: %v\n%s", err, schemaText)
	}
	m := dynamicpb.NewMessage(fd.Messages().Get(0))
	obj, ok := payload.(map[string]any)
	if !ok {
		t.Skipf("protobuf: a struct schema with a %T value", payload)
	}
	g.setStruct(m, connect, obj)
	msg, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatalf("encodeProtobuf: marshal: %v", err)
	}
	// One zero byte: the message indexes [0], the file's first message.
	return "PROTOBUF", schemaText, append([]byte{0}, msg...)
}

// pbWrapperOf is the wrapper message ProtobufConverter writes a bare
// primitive record as, by Connect type.
var pbWrapperOf = map[string]string{
	"int8": "Int32Value", "int16": "Int32Value", "int32": "Int32Value", "int64": "Int64Value",
	"float": "FloatValue", "float32": "FloatValue", "double": "DoubleValue", "float64": "DoubleValue",
	"boolean": "BoolValue", "string": "StringValue", "bytes": "BytesValue",
}

// primitive writes a bare primitive record as its wrapper message
// (wrapper.for.raw.primitives): the file declares the wrapper alone, in
// its own package, with the Connect name and parameters in its meta.
func (g *pbGen) primitive(connect map[string]any, payload any) (string, string, []byte) {
	wrapper, ok := pbWrapperOf[fmt.Sprint(connect["type"])]
	if !ok {
		g.t.Skipf("protobuf: ProtobufConverter writes a %v record as no message", connect["type"])
	}
	meta := map[string]string{}
	typ, derived := g.valueType(nil, connect, "value", nil, meta, "connect.")
	if derived["kind"] != "scalar" {
		g.t.Skipf("protobuf: ProtobufConverter writes a bare %v record as no message", connect["name"])
	}
	delete(derived, "kind")
	derived["optional"] = false
	pbDiff(connect, derived, "connect.", meta)
	var b strings.Builder
	b.WriteString("syntax = \"proto3\";\npackage google.protobuf;\n")
	if len(meta) > 0 {
		b.WriteString("import \"confluent/meta.proto\";\n")
	}
	fmt.Fprintf(&b, "message %s {\n", wrapper)
	if len(meta) > 0 {
		fmt.Fprintf(&b, "  option (confluent.message_meta) = %s;\n", pbMetaLiteral(meta))
	}
	fmt.Fprintf(&b, "  %s value = 1;\n}\n", typ)
	text := b.String()
	fd, err := compileProtobufFile(text, nil)
	if err != nil {
		g.t.Fatalf("encodeProtobuf: the generated schema does not compile: %v\n%s", err, text)
	}
	m := dynamicpb.NewMessage(fd.Messages().Get(0))
	vf := m.Descriptor().Fields().ByNumber(1)
	m.Set(vf, g.value(vf, nil, connect, payload, "value"))
	msg, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		g.t.Fatalf("encodeProtobuf: marshal: %v", err)
	}
	return "PROTOBUF", text, append([]byte{0}, msg...)
}

// pbGen builds a .proto source and fills its messages.
type pbGen struct {
	t       testing.TB
	imports map[string]bool
}

// pbMsgDef is one generated message.
type pbMsgDef struct {
	name   string
	meta   map[string]string
	fields []pbFieldDef
	nested []*pbMsgDef
	// types are the nested struct types by their schema, for reuse.
	types map[string]string
}

type pbFieldDef struct {
	label, typ, name string
	num              int
	meta             map[string]string
}

var pbIdentRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// pbScrub turns s into a Protobuf identifier.
func pbScrub(s string) string {
	if pbIdentRE.MatchString(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if r < 128 && (r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	out := b.String()
	if out == "" || out[0] >= '0' && out[0] <= '9' {
		out = "x" + out
	}
	return out
}

// pbSplitName splits a Connect name into a Protobuf package and message
// name, as ProtobufData does.
func pbSplitName(name string) (pkg, simple string) {
	if name == "" {
		return "", "ConnectDefault1"
	}
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return "", pbScrub(name)
	}
	parts := strings.Split(name[:i], ".")
	for j, p := range parts {
		parts[j] = pbScrub(p)
	}
	return strings.Join(parts, "."), pbScrub(name[i+1:])
}

// message generates the message of a Connect struct schema. used holds
// the names taken in the enclosing scope.
func (g *pbGen) message(s map[string]any, simple string, used map[string]bool) *pbMsgDef {
	name := simple
	for i := 2; used[name]; i++ {
		name = fmt.Sprintf("%s%d", simple, i)
	}
	used[name] = true
	d := &pbMsgDef{name: name, types: map[string]string{}, meta: map[string]string{}}
	cname, _ := s["name"].(string)
	d.meta["connect.name"] = cname
	if v, ok := s["version"]; ok {
		d.meta["connect.version"] = fmt.Sprint(v)
	}
	for k, v := range pbParams(s) {
		d.meta["connect.parameters."+k] = v
	}
	g.imports["confluent/meta.proto"] = true

	scope := map[string]bool{}
	fields := pbSchemaFields(s)
	for _, f := range fields {
		scope[pbScrub(f["field"].(string))] = true
	}
	for i, f := range fields {
		fname := f["field"].(string)
		fd := pbFieldDef{name: pbScrub(fname), num: i + 1, meta: map[string]string{}}
		if fd.name != fname {
			fd.meta["connect.field"] = fname
		}
		fd.label, fd.typ = g.fieldType(d, f, fd.name, scope, fd.meta)
		if len(fd.meta) > 0 {
			g.imports["confluent/meta.proto"] = true
		}
		d.fields = append(d.fields, fd)
	}
	return d
}

// fieldType returns the label and type of a field of schema f in message
// d, adding nested types to d and meta params for what the type alone
// does not say.
func (g *pbGen) fieldType(d *pbMsgDef, f map[string]any, fname string, scope map[string]bool, meta map[string]string) (label, typ string) {
	switch f["type"] {
	case "array":
		items, _ := f["items"].(map[string]any)
		if items["type"] == "array" || items["type"] == "map" {
			g.t.Skipf("protobuf: field %s is an array of %ss, which ProtobufData cannot write", fname, items["type"])
		}
		typ, derived := g.valueType(d, items, fname, scope, meta, "connect.items.")
		derived["optional"] = true
		delete(derived, "kind")
		pbDiff(items, derived, "connect.items.", meta)
		pbDiff(f, map[string]any{"type": "array", "optional": true}, "connect.", meta)
		return "repeated", typ
	case "map":
		keys, _ := f["keys"].(map[string]any)
		vals, _ := f["values"].(map[string]any)
		switch keys["type"] {
		case "string", "int32", "int64", "boolean":
		default:
			g.t.Skipf("protobuf: field %s is a map with %v keys, which Protobuf maps cannot have", fname, keys["type"])
		}
		if vals["type"] == "array" || vals["type"] == "map" {
			g.t.Skipf("protobuf: field %s is a map of %ss, which ProtobufData cannot write", fname, vals["type"])
		}
		kt, kd := g.valueType(d, keys, fname, scope, meta, "connect.keys.")
		kd["optional"] = false
		pbDiff(keys, kd, "connect.keys.", meta)
		vt, vd := g.valueType(d, vals, fname, scope, meta, "connect.values.")
		vd["optional"] = vd["kind"] != "scalar"
		delete(vd, "kind")
		pbDiff(vals, vd, "connect.values.", meta)
		pbDiff(f, map[string]any{"type": "map", "optional": true}, "connect.", meta)
		return "", fmt.Sprintf("map<%s, %s>", strings.TrimPrefix(kt, "."), vt)
	}
	typ, derived := g.valueType(d, f, fname, scope, meta, "connect.")
	opt, _ := f["optional"].(bool)
	if derived["kind"] == "scalar" {
		derived["optional"] = opt
		if opt {
			label = "optional"
		}
	} else {
		derived["optional"] = true
	}
	delete(derived, "kind")
	pbDiff(f, derived, "connect.", meta)
	return label, typ
}

// valueType returns the Protobuf type of one value of schema s and the
// Connect schema the decoder derives from that type (with "kind":
// "scalar" for a scalar without presence), before meta.
func (g *pbGen) valueType(d *pbMsgDef, s map[string]any, fname string, scope map[string]bool, meta map[string]string, prefix string) (string, map[string]any) {
	name, _ := s["name"].(string)
	logical := func(imp, typ, ctype string) (string, map[string]any) {
		g.imports[imp] = true
		return "." + typ, map[string]any{"type": ctype, "name": name, "version": json.Number("1")}
	}
	switch name {
	case connectDecimal:
		ps := pbParams(s)
		if prefix == "connect." || prefix == "connect.items." {
			if sc, ok := ps["scale"]; ok {
				meta["scale"] = sc
			}
			if p, ok := ps["connect.decimal.precision"]; ok {
				meta["precision"] = p
			}
		} else if len(ps) > 0 {
			g.t.Skipf("protobuf: field %s: a Decimal map key or value has no field meta of its own for its scale", fname)
		}
		t, der := logical("confluent/type/decimal.proto", "confluent.type.Decimal", "bytes")
		dps := map[string]any{"scale": "0"}
		if sc, ok := ps["scale"]; ok {
			dps["scale"] = sc
		}
		if p, ok := ps["connect.decimal.precision"]; ok {
			dps["connect.decimal.precision"] = p
		}
		der["parameters"] = dps
		return t, der
	case connectDate:
		return logical("google/type/date.proto", "google.type.Date", "int32")
	case connectTime:
		return logical("google/type/timeofday.proto", "google.type.TimeOfDay", "int32")
	case connectTimestamp:
		return logical("google/protobuf/timestamp.proto", "google.protobuf.Timestamp", "int64")
	}
	scalar := func(pt, ct string) (string, map[string]any) {
		return pt, map[string]any{"type": ct, "kind": "scalar"}
	}
	switch s["type"] {
	case "int8", "int16":
		if prefix != "connect." && prefix != "connect.items." {
			g.t.Skipf("protobuf: field %s: an int8 or int16 map key or value has no field meta of its own for connect.type", fname)
		}
		meta["connect.type"] = s["type"].(string)
		return scalar("int32", s["type"].(string))
	case "int32":
		return scalar("int32", "int32")
	case "int64":
		return scalar("int64", "int64")
	case "float32", "float":
		return scalar("float", "float")
	case "float64", "double":
		return scalar("double", "double")
	case "boolean":
		return scalar("bool", "boolean")
	case "string":
		return scalar("string", "string")
	case "bytes":
		return scalar("bytes", "bytes")
	case "struct":
		key, _ := json.Marshal(pbTypeKey(s))
		if tn, ok := d.types[string(key)]; ok {
			return tn, pbStructDerived(s)
		}
		_, simple := pbSplitName(name)
		if name == "" {
			simple = "Struct"
		}
		if simple == fname {
			simple += "Message" // as ProtobufData: a type cannot share its field's name
		}
		nd := g.message(s, simple, scope)
		d.nested = append(d.nested, nd)
		d.types[string(key)] = nd.name
		return nd.name, pbStructDerived(s)
	}
	g.t.Skipf("protobuf: field %s has Connect type %v, which this encoder does not write", fname, s["type"])
	return "", nil
}

// pbStructDerived is what the decoder derives for a struct field from the
// message alone: the message's meta gives its name, version and
// parameters, so only "optional" and "default" can differ.
func pbStructDerived(s map[string]any) map[string]any {
	d := map[string]any{}
	for _, k := range []string{"name", "version", "parameters"} {
		if v, ok := s[k]; ok {
			d[k] = v
		}
	}
	return d
}

// pbTypeKey is a struct schema without what belongs to the field using it.
func pbTypeKey(s map[string]any) map[string]any {
	k := make(map[string]any, len(s))
	for n, v := range s {
		if n != "field" && n != "optional" && n != "default" {
			k[n] = v
		}
	}
	return k
}

// pbDiff adds the meta params that make the derived schema d the Connect
// schema s.
func pbDiff(s, d map[string]any, prefix string, meta map[string]string) {
	sn, _ := s["name"].(string)
	dn, _ := d["name"].(string)
	if sn != dn {
		meta[prefix+"name"] = sn
	}
	if sv, ok := s["version"]; ok && fmt.Sprint(sv) != fmt.Sprint(d["version"]) {
		meta[prefix+"version"] = fmt.Sprint(sv)
	}
	dps, _ := d["parameters"].(map[string]any)
	for k, v := range pbParams(s) {
		if fmt.Sprint(dps[k]) != v {
			meta[prefix+"parameters."+k] = v
		}
	}
	if def, ok := s["default"]; ok {
		b, _ := json.Marshal(def)
		meta[prefix+"default"] = string(b)
	}
	so, _ := s["optional"].(bool)
	if do, ok := d["optional"].(bool); ok && so != do {
		meta[prefix+"optional"] = strconv.FormatBool(so)
	}
}

// pbParams are the parameters of a Connect schema as strings.
func pbParams(s map[string]any) map[string]string {
	ps, _ := s["parameters"].(map[string]any)
	out := make(map[string]string, len(ps))
	for k, v := range ps {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// pbSchemaFields are the field schemas of a Connect struct schema.
func pbSchemaFields(s map[string]any) []map[string]any {
	fs, _ := s["fields"].([]any)
	out := make([]map[string]any, 0, len(fs))
	for _, f := range fs {
		if m, ok := f.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// write writes the message definition at indent.
func (d *pbMsgDef) write(b *strings.Builder, indent string) {
	fmt.Fprintf(b, "%smessage %s {\n", indent, d.name)
	if len(d.meta) > 0 {
		fmt.Fprintf(b, "%s  option (confluent.message_meta) = %s;\n", indent, pbMetaLiteral(d.meta))
	}
	for _, f := range d.fields {
		fmt.Fprintf(b, "%s  ", indent)
		if f.label != "" {
			b.WriteString(f.label + " ")
		}
		fmt.Fprintf(b, "%s %s = %d", f.typ, f.name, f.num)
		if len(f.meta) > 0 {
			fmt.Fprintf(b, " [(confluent.field_meta) = %s]", pbMetaLiteral(f.meta))
		}
		b.WriteString(";\n")
	}
	for _, n := range d.nested {
		n.write(b, indent+"  ")
	}
	fmt.Fprintf(b, "%s}\n", indent)
}

// pbMetaLiteral is a confluent.Meta literal with params.
func pbMetaLiteral(params map[string]string) string {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	entries := make([]string, len(keys))
	for i, k := range keys {
		entries[i] = fmt.Sprintf("{key: %s, value: %s}", strconv.Quote(k), strconv.Quote(params[k]))
	}
	return "{params: [" + strings.Join(entries, ", ") + "]}"
}

// setStruct fills m from a struct value of schema s.
func (g *pbGen) setStruct(m protoreflect.Message, s map[string]any, v map[string]any) {
	md := m.Descriptor()
	for i, f := range pbSchemaFields(s) {
		fname := f["field"].(string)
		fd := md.Fields().ByNumber(protoreflect.FieldNumber(i + 1))
		fv := v[fname]
		if fv == nil {
			if !fd.HasPresence() && !fd.IsList() && !fd.IsMap() {
				g.t.Skipf("protobuf: field %s is null but required", fname)
			}
			continue
		}
		switch {
		case fd.IsList():
			arr, ok := fv.([]any)
			if !ok {
				g.t.Skipf("protobuf: field %s: an array schema with a %T value", fname, fv)
			}
			items, _ := f["items"].(map[string]any)
			l := m.Mutable(fd).List()
			for _, e := range arr {
				if e == nil {
					g.t.Skipf("protobuf: field %s holds a null element, which a repeated field cannot", fname)
				}
				l.Append(g.value(fd, l.NewElement, items, e, fname))
			}
		case fd.IsMap():
			vals, _ := f["values"].(map[string]any)
			keys, _ := f["keys"].(map[string]any)
			mp := m.Mutable(fd).Map()
			put := func(k, e any) {
				if e == nil {
					g.t.Skipf("protobuf: field %s holds a null map value, which a Protobuf map cannot", fname)
				}
				if sk, ok := k.(string); ok && keys["type"] != "string" {
					k = json.Number(sk) // an object's keys are strings
				}
				kv := g.value(fd.MapKey(), nil, keys, k, fname)
				mp.Set(kv.MapKey(), g.value(fd.MapValue(), mp.NewValue, vals, e, fname))
			}
			switch mv := fv.(type) {
			case map[string]any:
				for k, e := range mv {
					put(k, e)
				}
			case []any:
				for _, p := range mv {
					pair, ok := p.([]any)
					if !ok || len(pair) != 2 {
						g.t.Skipf("protobuf: field %s: a map pair that is not [key, value]", fname)
					}
					put(pair[0], pair[1])
				}
			default:
				g.t.Skipf("protobuf: field %s: a map schema with a %T value", fname, fv)
			}
		default:
			m.Set(fd, g.value(fd, func() protoreflect.Value { return m.NewField(fd) }, f, fv, fname))
		}
	}
}

// value converts one Connect value of schema s to the Protobuf value of
// field fd; newMsg makes an empty message of fd's type.
func (g *pbGen) value(fd protoreflect.FieldDescriptor, newMsg func() protoreflect.Value, s map[string]any, v any, fname string) protoreflect.Value {
	bad := func(what string) {
		g.t.Skipf("protobuf: field %s: %s, got %T %v", fname, what, v, v)
	}
	name, _ := s["name"].(string)
	setMsg := func(set func(m protoreflect.Message)) protoreflect.Value {
		mv := newMsg()
		set(mv.Message())
		return mv
	}
	field := func(m protoreflect.Message, n string) protoreflect.FieldDescriptor {
		return m.Descriptor().Fields().ByName(protoreflect.Name(n))
	}
	switch name {
	case connectDecimal:
		str, ok := v.(string)
		raw, err := base64.StdEncoding.DecodeString(str)
		if !ok || err != nil {
			bad("a Decimal wants a base64 string")
		}
		scale, _ := strconv.Atoi(pbParams(s)["scale"])
		return setMsg(func(m protoreflect.Message) {
			m.Set(field(m, "value"), protoreflect.ValueOfBytes(raw))
			m.Set(field(m, "scale"), protoreflect.ValueOfInt32(int32(scale)))
			if p, err := strconv.Atoi(pbParams(s)["connect.decimal.precision"]); err == nil {
				m.Set(field(m, "precision"), protoreflect.ValueOfUint32(uint32(p)))
			}
		})
	case connectDate:
		days := g.int(v, bad)
		t := time.Unix(days*86400, 0).UTC()
		return setMsg(func(m protoreflect.Message) {
			m.Set(field(m, "year"), protoreflect.ValueOfInt32(int32(t.Year())))
			m.Set(field(m, "month"), protoreflect.ValueOfInt32(int32(t.Month())))
			m.Set(field(m, "day"), protoreflect.ValueOfInt32(int32(t.Day())))
		})
	case connectTime:
		ms := g.int(v, bad)
		if ms < 0 || ms >= 86_400_000 {
			bad("a Time wants milliseconds of one day")
		}
		return setMsg(func(m protoreflect.Message) {
			m.Set(field(m, "hours"), protoreflect.ValueOfInt32(int32(ms/3_600_000)))
			m.Set(field(m, "minutes"), protoreflect.ValueOfInt32(int32(ms/60_000%60)))
			m.Set(field(m, "seconds"), protoreflect.ValueOfInt32(int32(ms/1000%60)))
			m.Set(field(m, "nanos"), protoreflect.ValueOfInt32(int32(ms%1000*1_000_000)))
		})
	case connectTimestamp:
		ms := g.int(v, bad)
		sec, rem := ms/1000, ms%1000
		if rem < 0 {
			sec, rem = sec-1, rem+1000
		}
		return setMsg(func(m protoreflect.Message) {
			m.Set(field(m, "seconds"), protoreflect.ValueOfInt64(sec))
			m.Set(field(m, "nanos"), protoreflect.ValueOfInt32(int32(rem*1_000_000)))
		})
	}
	kind := fd.Kind()
	switch kind {
	case protoreflect.Int32Kind:
		n := g.int(v, bad)
		if n < math.MinInt32 || n > math.MaxInt32 {
			bad("an int32 out of range")
		}
		return protoreflect.ValueOfInt32(int32(n))
	case protoreflect.Int64Kind:
		return protoreflect.ValueOfInt64(g.int(v, bad))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(g.float(v, bad)))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(g.float(v, bad))
	case protoreflect.BoolKind:
		b, ok := v.(bool)
		if !ok {
			bad("a boolean")
		}
		return protoreflect.ValueOfBool(b)
	case protoreflect.StringKind:
		str, ok := v.(string)
		if !ok {
			bad("a string")
		}
		if !utf8.ValidString(str) {
			bad("text that is UTF-8")
		}
		return protoreflect.ValueOfString(str)
	case protoreflect.BytesKind:
		str, ok := v.(string)
		raw, err := base64.StdEncoding.DecodeString(str)
		if !ok || err != nil {
			bad("bytes as a base64 string")
		}
		return protoreflect.ValueOfBytes(raw)
	case protoreflect.MessageKind:
		obj, ok := v.(map[string]any)
		if !ok {
			bad("a struct")
		}
		return setMsg(func(m protoreflect.Message) { g.setStruct(m, s, obj) })
	}
	g.t.Fatalf("encodeProtobuf: field %s: no conversion to %s", fname, kind)
	return protoreflect.Value{}
}

// int reads an integer value (json.Number or float64).
func (g *pbGen) int(v any, bad func(string)) int64 {
	switch n := v.(type) {
	case json.Number:
		i, err := strconv.ParseInt(string(n), 10, 64)
		if err == nil {
			return i
		}
	case float64:
		if n == math.Trunc(n) && math.Abs(n) < 1<<53 {
			return int64(n)
		}
	}
	bad("an integer")
	return 0
}

// float reads a floating-point value, with Jackson's NaN and infinities.
func (g *pbGen) float(v any, bad func(string)) float64 {
	switch n := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(n), 64)
		if err == nil {
			return f
		}
	case float64:
		return n
	case string:
		switch n {
		case "NaN":
			return math.NaN()
		case "Infinity":
			return math.Inf(1)
		case "-Infinity":
			return math.Inf(-1)
		}
	}
	bad("a number")
	return 0
}
