package cdc_test

import (
	"errors"
	"fmt"

	"github.com/ragsync/ragsync/cdc"
)

func ExampleDecoder_Decode() {
	d := cdc.NewDecoder(cdc.DecoderConfig{
		Tables: []cdc.TableConfig{{Match: "public.articles", ID: []string{"id"}}},
	})
	ch, err := d.Decode(cdc.Record{Raw: cdc.Raw{Topic: "dbserver1.public.articles", Offset: 42, Value: []byte(`{"before":null,
			"after":{"id":7,"title":"Hello","body":"__debezium_unavailable_value"},
			"source":{"connector":"postgresql","schema":"public","table":"articles","lsn":34650016,"txId":627,"ts_ms":1570448151151},
			"op":"u","ts_ms":1570448151611}`)}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ch.Op, ch.Table, ch.DocKey, ch.Version, ch.TxID)
	fmt.Println(ch.After["title"], ch.Unavailable)

	// A tombstone (the null value after a delete) is skipped, not an error.
	_, err = d.Decode(cdc.Record{Raw: cdc.Raw{Topic: "dbserver1.public.articles", Offset: 43}})
	fmt.Println(errors.Is(err, cdc.ErrSkip), err)

	// Malformed input names its coordinates; it is permanent: dead-letter it.
	_, err = d.Decode(cdc.Record{Raw: cdc.Raw{Topic: "dbserver1.public.articles", Offset: 44, Value: []byte(`{"op":"x","after":{},"source":{}}`)}})
	var de *cdc.DecodeError
	fmt.Println(errors.As(err, &de) && de.Permanent(), err)
	// Output:
	// u public.articles 7 pg:000000000210b7a0;ts=1570448151151 627
	// Hello [body]
	// true skip tombstone: not a row change
	// true decode dbserver1.public.articles/0@44: unknown op: op "x"
}
