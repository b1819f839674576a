package cdc

import (
	"os"
	"path/filepath"
	"testing"
)

func BenchmarkDecode(b *testing.B) {
	for _, name := range []string{"pg-create-logical-types", "pg-update-toast", "mongo-create-ext"} {
		b.Run(name, func(b *testing.B) {
			v, err := os.ReadFile(filepath.Join("testdata", name+".json"))
			if err != nil {
				b.Fatal(err)
			}
			k, _ := os.ReadFile(filepath.Join("testdata", name+".key.json"))
			m := Record{Raw: Raw{Topic: "dbserver1.public.articles", Key: k, Value: v}}
			d := NewDecoder(DecoderConfig{})
			b.SetBytes(int64(len(v)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := d.Decode(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
