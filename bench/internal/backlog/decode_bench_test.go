package backlog

import (
	"testing"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/registry"
	"github.com/ragsync/ragsync/cdc/registry/srtest"
)

// BenchmarkDecodeAvroVsJSON decodes one backlog change as payload-only JSON
// (schemas.enable=false, the cheapest JSON) and as Avro through a schema
// registry (its schema cached, as after the first record): both give the
// same cdc.Change (TestAvroEventsDecodeLikeJSON), so the two are the cost of
// the same work. cdc/registry's benchmarks compare a change with Debezium's
// logical types against JSON with its schema, which that change needs.
func BenchmarkDecodeAvroVsJSON(b *testing.B) {
	reg := srtest.New(b, srtest.Options{})
	a, _ := NewAvro("t", func(s, typ, text string) int { return reg.Register(s, typ, text) })
	client, _ := registry.New(registry.Config{URL: reg.URL()})
	j := Event(150, 100)
	r, _ := a.Event(150, 100)
	for _, c := range []struct {
		name string
		d    *cdc.Decoder
		rec  cdc.Record
	}{
		{"json", cdc.NewDecoder(cdc.DecoderConfig{}), cdc.Record{Raw: cdc.Raw{Topic: "t", Key: j.Key, Value: j.Value}}},
		{"avro", cdc.NewDecoder(cdc.DecoderConfig{Schemas: client}), cdc.Record{Raw: cdc.Raw{Topic: "t", Key: r.Key, Value: r.Value}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.d.Decode(c.rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
