package registry

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/registry/srtest"
)

// BenchmarkDecodeAvroVsJSON decodes one change, key and value, as
// JsonConverter writes it (with its schema) and as AvroConverter writes it,
// through the same cdc.Decoder. Decoding Avro must cost no more CPU than
// decoding JSON.
func BenchmarkDecodeAvroVsJSON(b *testing.B) {
	const name = "pg-create-logical-types"
	value, err := os.ReadFile(filepath.Join("..", "testdata", name+".json"))
	if err != nil {
		b.Fatal(err)
	}
	key, err := os.ReadFile(filepath.Join("..", "testdata", name+".key.json"))
	if err != nil {
		b.Fatal(err)
	}
	jsonRec := cdc.Record{Raw: cdc.Raw{Topic: "dbserver1.public.articles", Key: key, Value: value}}

	srv := srtest.New(b, srtest.Options{})
	reg, err := New(Config{URL: srv.URL()})
	if err != nil {
		b.Fatal(err)
	}
	frame := func(subject string, msg []byte) []byte {
		var env struct {
			Schema  map[string]any
			Payload any
		}
		dec := json.NewDecoder(bytes.NewReader(msg))
		dec.UseNumber()
		if err := dec.Decode(&env); err != nil {
			b.Fatal(err)
		}
		env.Schema["optional"] = false
		text, body, err := avroEncode(env.Schema, env.Payload)
		if err != nil {
			b.Fatal(err)
		}
		return srtest.Frame(srv.Register(subject, "AVRO", text), body)
	}
	avroRec := jsonRec
	avroRec.Key = frame("dbserver1.public.articles-key", key)
	avroRec.Value = frame("dbserver1.public.articles-value", value)

	for _, bc := range []struct {
		name string
		rec  cdc.Record
		dec  *cdc.Decoder
	}{
		{"json", jsonRec, cdc.NewDecoder(cdc.DecoderConfig{})},
		{"avro", avroRec, cdc.NewDecoder(cdc.DecoderConfig{Schemas: reg})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			// The first decode fetches the schemas; the loop measures the
			// steady state.
			if _, err := bc.dec.DecodeContext(b.Context(), bc.rec); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(bc.rec.Key) + len(bc.rec.Value)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.dec.DecodeContext(b.Context(), bc.rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
