package main

import (
	"testing"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
)

func TestFormatConsumedShowsHeadersAndRedeliveries(t *testing.T) {
	id := client.MessageID{Segment: 2, Bucket: 1, Offset: 7}
	cases := []struct {
		m    consumed
		want string
	}{
		{consumed{id: id, key: []byte("k1"), payload: []byte("hello")}, id.String() + "\tk1\thello\n"},
		{consumed{id: id, key: []byte("k1"), payload: []byte("hello"), deliveries: 1,
			headers: []api.Header{{Name: "Trace-Id", Value: []byte("abc")}, {Name: "X-Tag", Value: []byte("red")}}},
			id.String() + "\tk1\thello\tTrace-Id=abc X-Tag=red\n"},
		{consumed{id: id, payload: []byte("p"), deliveries: 3}, id.String() + "\t\tp\t(delivery 3)\n"},
	}
	for _, c := range cases {
		if got := formatConsumed(c.m); got != c.want {
			t.Errorf("formatConsumed = %q, want %q", got, c.want)
		}
	}
}
