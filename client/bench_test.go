package client_test

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
)

// BenchmarkProducer measures the producer against a real node: keyed
// records of 100 bytes over 1,000 keys, 4 segments, 8 buckets.
func BenchmarkProducer(b *testing.B) {
	for _, linger := range []string{"0", "1ms"} {
		b.Run("linger="+linger, func(b *testing.B) {
			_, nc := startNode(b)
			const uri = "topic://public/default/bench"
			if _, err := client.NewAdmin(nc).CreateTopic(context.Background(), uri, 4, client.WithTopicBuckets(8)); err != nil {
				b.Fatal(err)
			}
			opts := []client.ProducerOption{}
			if linger == "0" {
				opts = append(opts, client.WithLinger(0))
			}
			p, err := client.NewProducer(nc, uri, opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(context.Background())
			payload := make([]byte, 100)
			var wg sync.WaitGroup
			b.SetBytes(int64(len(payload)))
			for i := 0; b.Loop(); i++ {
				wg.Add(1)
				rec := api.Record{Key: []byte(strconv.Itoa(i % 1000)), Payload: payload}
				if err := p.Send(context.Background(), rec, func(_ client.MessageID, err error) {
					if err != nil {
						b.Error(err)
					}
					wg.Done()
				}); err != nil {
					b.Fatal(err)
				}
			}
			wg.Wait()
		})
	}
}
