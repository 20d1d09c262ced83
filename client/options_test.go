package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
)

func TestProducerOptionsValidated(t *testing.T) {
	tests := []struct {
		name string
		opt  ProducerOption
		ok   bool
	}{
		{"defaults", WithLinger(DefaultLinger), true},
		{"in flight 1", WithMaxInFlight(1), true},
		{"in flight 0", WithMaxInFlight(0), false},
		{"in flight huge", WithMaxInFlight(1 << 30), false},
		{"batch ok", WithBatch(10, 1024), true},
		{"batch no records", WithBatch(0, 1024), false},
		{"batch no bytes", WithBatch(10, 0), false},
		{"batch above max payload", WithBatch(10, 2<<20), false},
		{"linger 0", WithLinger(0), true},
		{"unit pipeline 1", WithUnitPipeline(1), true},
		{"unit pipeline 0", WithUnitPipeline(0), false},
		{"unit pipeline too deep", WithUnitPipeline(65), false},
		{"linger negative", WithLinger(-time.Millisecond), false},
		{"linger too long", WithLinger(time.Hour), false},
		{"timeout 0", WithRequestTimeout(0), false},
		{"timeout ok", WithRequestTimeout(time.Second), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := defaultProducerConfig()
			tt.opt.applyProducer(&cfg)
			err := cfg.validate(1 << 20)
			if tt.ok != (err == nil) {
				t.Fatalf("validate = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidOption) {
				t.Fatalf("%v does not wrap ErrInvalidOption", err)
			}
		})
	}
}

func TestConsumerOptionsValidated(t *testing.T) {
	tests := []struct {
		name string
		opt  ConsumerOption
		ok   bool
	}{
		{"name ok", WithConsumerName("worker-1_a"), true},
		{"name with dot", WithConsumerName("worker.1"), false},
		{"name too long", WithConsumerName(string(make([]byte, 129))), false},
		{"start latest", WithStart(api.StartLatest), true},
		{"start bad", WithStart("newest"), false},
		{"fetch ok", WithFetch(10, 1000, 0), true},
		{"fetch max 0", WithFetch(0, 1000, time.Second), false},
		{"fetch max too big", WithFetch(10_001, 1000, time.Second), false},
		{"fetch bytes 0", WithFetch(1, 0, time.Second), false},
		{"fetch wait too long", WithFetch(1, 1, time.Minute), false},
		{"fetch wait negative", WithFetch(1, 1, -1), false},
		{"session ok", WithSessionTimeout(3 * time.Second), true},
		{"session too short", WithSessionTimeout(time.Millisecond), false},
		{"ack interval 0", WithAckInterval(0), false},
		{"ack interval ok", WithAckInterval(time.Millisecond), true},
		{"timeout negative", WithRequestTimeout(-time.Second), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := defaultConsumerConfig()
			tt.opt.applyConsumer(&cfg)
			err := cfg.validate()
			if tt.ok != (err == nil) {
				t.Fatalf("validate = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidOption) {
				t.Fatalf("%v does not wrap ErrInvalidOption", err)
			}
		})
	}
}

func TestReadCompactedIsNotAQueueOption(t *testing.T) {
	stream, queue, cp := defaultConsumerConfig(), queueConfig{consumerConfig: defaultConsumerConfig()}, checkpointConfig{consumerConfig: defaultConsumerConfig()}
	WithReadCompacted().applyConsumer(&stream)
	WithReadCompacted().applyQueue(&queue)
	WithReadCompacted().applyCheckpoint(&cp)
	if !stream.readCompacted || stream.validate() != nil || !cp.readCompacted || cp.validate() != nil {
		t.Fatal("stream and checkpoint consumers take WithReadCompacted")
	}
	if err := queue.validate(); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("a queue consumer with WithReadCompacted: %v", err)
	}
}

func TestNewAdminPanicsOnBadOption(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	NewAdmin(nil, WithRequestTimeout(0))
}

// TestDefaultBatchFitsTheServer checks the default batch size against the
// NATS max payload: 1 MiB where the server takes 8 MiB messages (Braid's
// embedded NATS), half the max payload on a stock server (1 MB), so a
// default producer never builds a batch the server refuses; a batch size
// the application chose stays as it is.
func TestDefaultBatchFitsTheServer(t *testing.T) {
	for _, tt := range []struct{ maxPayload, want int64 }{
		{8 << 20, DefaultBatchBytes}, {2 << 20, DefaultBatchBytes}, {1 << 20, 512 << 10}, {64 << 10, 32 << 10}, {0, DefaultBatchBytes},
	} {
		if got := defaultBatchBytes(tt.maxPayload); int64(got) != tt.want {
			t.Errorf("defaultBatchBytes(%d) = %d, want %d", tt.maxPayload, got, tt.want)
		}
	}
	_, stock := newFake(t, 1, 1)
	p, err := NewProducer(stock, fakeURI)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	if got, want := p.cfg.batchBytes, int(stock.MaxPayload()/2); got != want {
		t.Fatalf("default batch on a server with max payload %d: %d bytes, want %d", stock.MaxPayload(), got, want)
	}
	chosen, err := NewProducer(stock, fakeURI, WithBatch(10, 900<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer chosen.Close(context.Background())
	if chosen.cfg.batchBytes != 900<<10 {
		t.Fatalf("WithBatch(10, 900 KiB) gave %d bytes", chosen.cfg.batchBytes)
	}
}
