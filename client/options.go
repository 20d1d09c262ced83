package client

import (
	"fmt"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
)

// Options are typed: a ProducerOption cannot be passed to NewStreamConsumer.
// An option only records its value; the constructor validates every value and
// refuses the first bad one with an error wrapping ErrInvalidOption, so a
// misconfigured client fails at construction, not at its first send.

// ProducerOption configures NewProducer.
type ProducerOption interface{ applyProducer(*producerConfig) }

// ConsumerOption configures NewStreamConsumer; each also configures
// NewQueueConsumer and NewCheckpointConsumer (see QueueOption and
// CheckpointOption).
type ConsumerOption interface {
	applyConsumer(*consumerConfig)
	QueueOption
	CheckpointOption
}

// AdminOption configures NewAdmin.
type AdminOption interface{ applyAdmin(*adminConfig) }

// Defaults.
const (
	DefaultMaxInFlight    = 10_000
	DefaultBatchRecords   = 1_000
	DefaultBatchBytes     = 1 << 20
	DefaultLinger         = time.Millisecond
	DefaultUnitPipeline   = 1
	DefaultRequestTimeout = 5 * time.Second
	DefaultFetchMax       = 256
	DefaultFetchMaxBytes  = 1 << 20
	DefaultFetchWait      = time.Second
	DefaultSessionTimeout = 10 * time.Second
	DefaultAckInterval    = 20 * time.Millisecond
)

// Limits enforced at construction.
const (
	maxMaxInFlight    = 1 << 24
	maxBatchRecords   = 100_000
	maxBytesLimit     = 64 << 20
	maxLinger         = 10 * time.Second
	maxUnitPipeline   = 64
	maxRequestTimeout = 10 * time.Minute
	maxFetchMax       = 10_000
	maxFetchWait      = 30 * time.Second
	minSessionTimeout = 100 * time.Millisecond
	maxSessionTimeout = time.Hour
	maxAckInterval    = time.Minute
)

// producerConfig holds a Producer's settings; see the With* functions.
type producerConfig struct {
	maxInFlight    int
	batchRecords   int
	batchBytes     int
	linger         time.Duration
	unitPipeline   int
	requestTimeout time.Duration
	epochRouting   bool
	direct         bool
}

func defaultProducerConfig() producerConfig {
	return producerConfig{
		maxInFlight:    DefaultMaxInFlight,
		batchRecords:   DefaultBatchRecords,
		batchBytes:     DefaultBatchBytes,
		linger:         DefaultLinger,
		unitPipeline:   DefaultUnitPipeline,
		requestTimeout: DefaultRequestTimeout,
		direct:         true,
	}
}

// defaultBatchBytes is the batch size of a producer that does not choose
// one, on a connection whose server takes messages of up to maxPayload
// bytes (0: unknown): DefaultBatchBytes, or half of maxPayload when that is
// less, leaving room for framing and headers.
func defaultBatchBytes(maxPayload int64) int {
	if maxPayload > 0 && int64(DefaultBatchBytes) > maxPayload/2 {
		return int(maxPayload / 2)
	}
	return DefaultBatchBytes
}

// validate checks every setting; maxPayload is the NATS connection's
// largest message, which a batch must fit in.
func (c *producerConfig) validate(maxPayload int64) error {
	switch {
	case c.maxInFlight < 1 || c.maxInFlight > maxMaxInFlight:
		return invalid("WithMaxInFlight(%d): want 1 to %d records", c.maxInFlight, maxMaxInFlight)
	case c.batchRecords < 1 || c.batchRecords > maxBatchRecords:
		return invalid("WithBatch: maxRecords %d, want 1 to %d", c.batchRecords, maxBatchRecords)
	case c.batchBytes < 1 || c.batchBytes > maxBytesLimit:
		return invalid("WithBatch: maxBytes %d, want 1 to %d", c.batchBytes, maxBytesLimit)
	case maxPayload > 0 && int64(c.batchBytes) > maxPayload:
		return invalid("WithBatch: maxBytes %d is above the NATS server's max payload %d", c.batchBytes, maxPayload)
	case c.linger < 0 || c.linger > maxLinger:
		return invalid("WithLinger(%s): want 0 to %s", c.linger, maxLinger)
	case c.unitPipeline < 1 || c.unitPipeline > maxUnitPipeline:
		return invalid("WithUnitPipeline(%d): want 1 to %d batches", c.unitPipeline, maxUnitPipeline)
	case c.requestTimeout <= 0 || c.requestTimeout > maxRequestTimeout:
		return invalid("WithRequestTimeout(%s): want above 0 and at most %s", c.requestTimeout, maxRequestTimeout)
	}
	return nil
}

// consumerConfig holds a StreamConsumer's settings; see the With* functions.
type consumerConfig struct {
	name           string
	start          string
	fetchMax       int
	fetchMaxBytes  int
	fetchWait      time.Duration
	sessionTimeout time.Duration
	ackInterval    time.Duration
	requestTimeout time.Duration
	readCompacted  bool
}

func defaultConsumerConfig() consumerConfig {
	return consumerConfig{
		start:          api.StartEarliest,
		fetchMax:       DefaultFetchMax,
		fetchMaxBytes:  DefaultFetchMaxBytes,
		fetchWait:      DefaultFetchWait,
		sessionTimeout: DefaultSessionTimeout,
		ackInterval:    DefaultAckInterval,
		requestTimeout: DefaultRequestTimeout,
	}
}

func (c *consumerConfig) validate() error {
	if c.name != "" {
		if err := routing.ValidateName(c.name); err != nil {
			return invalid("WithConsumerName: %v", err)
		}
	}
	switch {
	case c.start != api.StartEarliest && c.start != api.StartLatest:
		return invalid("WithStart(%q): want %q or %q", c.start, api.StartEarliest, api.StartLatest)
	case c.fetchMax < 1 || c.fetchMax > maxFetchMax:
		return invalid("WithFetch: max %d, want 1 to %d messages", c.fetchMax, maxFetchMax)
	case c.fetchMaxBytes < 1 || c.fetchMaxBytes > maxBytesLimit:
		return invalid("WithFetch: maxBytes %d, want 1 to %d", c.fetchMaxBytes, maxBytesLimit)
	case c.fetchWait < 0 || c.fetchWait > maxFetchWait:
		return invalid("WithFetch: wait %s, want 0 to %s", c.fetchWait, maxFetchWait)
	case c.sessionTimeout < minSessionTimeout || c.sessionTimeout > maxSessionTimeout:
		return invalid("WithSessionTimeout(%s): want %s to %s", c.sessionTimeout, minSessionTimeout, maxSessionTimeout)
	case c.ackInterval <= 0 || c.ackInterval > maxAckInterval:
		return invalid("WithAckInterval(%s): want above 0 and at most %s", c.ackInterval, maxAckInterval)
	case c.requestTimeout <= 0 || c.requestTimeout > maxRequestTimeout:
		return invalid("WithRequestTimeout(%s): want above 0 and at most %s", c.requestTimeout, maxRequestTimeout)
	}
	return nil
}

type adminConfig struct {
	requestTimeout time.Duration
}

func (c *adminConfig) validate() error {
	if c.requestTimeout <= 0 || c.requestTimeout > maxRequestTimeout {
		return invalid("WithRequestTimeout(%s): want above 0 and at most %s", c.requestTimeout, maxRequestTimeout)
	}
	return nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidOption, fmt.Sprintf(format, args...))
}

// producerOption adapts a function to ProducerOption.
type producerOption func(*producerConfig)

func (f producerOption) applyProducer(c *producerConfig) { f(c) }

// consumerOption adapts a function to ConsumerOption.
type consumerOption func(*consumerConfig)

func (f consumerOption) applyConsumer(c *consumerConfig) { f(c) }

// WithMaxInFlight bounds the records a Producer holds that are not yet
// acknowledged (queued or sent): Send blocks while n records are pending.
// Default 10,000; 1 to 2^24.
func WithMaxInFlight(n int) ProducerOption {
	return producerOption(func(c *producerConfig) { c.maxInFlight = n })
}

// WithBatch bounds one produce-batch request: at most maxRecords records
// (default 1,000) and about maxBytes bytes of keys, headers and payloads
// (default 1 MiB, or half the NATS max payload when that is less: 512 KiB
// on a stock NATS server; at most the NATS max payload). A single record
// larger than maxBytes is sent alone. Larger batches cost fewer requests
// and fsyncs per record: 1 MiB produced 1 KiB records 15 % faster than
// 512 KiB here (benchmarks/profile -batch-bytes).
func WithBatch(maxRecords, maxBytes int) ProducerOption {
	return producerOption(func(c *producerConfig) { c.batchRecords, c.batchBytes = maxRecords, maxBytes })
}

// WithLinger is how long a record may wait for more records to fill its
// batch (default 1ms). 0 sends as soon as the sender is free: records that
// arrive while a unit's previous batch is in flight still travel together.
func WithLinger(d time.Duration) ProducerOption {
	return producerOption(func(c *producerConfig) { c.linger = d })
}

// WithDirect says whether the producer sends its batches straight to the
// node of a cluster that owns the topic, as the layout names it (the
// default), or to any node, which forwards them (false). A batch that
// finds the owner gone or the topic moved is resent: through any node
// when no node took it, by the new layout when the old owner refused it
// SEGMENT_SEALED.
func WithDirect(on bool) ProducerOption {
	return producerOption(func(c *producerConfig) { c.direct = on })
}

// WithEpochRouting makes the producer name, on every batch, the layout
// epoch it routed the batch by (api.HeaderEpoch): the server then refuses
// with SEGMENT_SEALED what meets a seal or whose key moved since, and the
// producer re-routes it itself (the contract before servers absorbed
// layout changes). By default the producer names no epoch and the server
// hands what meets a seal to the successor, in order.
func WithEpochRouting(on bool) ProducerOption {
	return producerOption(func(c *producerConfig) { c.epochRouting = on })
}

// WithUnitPipeline is how many batches one unit (segment, entry bucket) may
// have in flight at once (default 1, at most 64). With more than one, a
// unit sends another batch while one is in flight only when its queue fills
// a whole batch (WithBatch), so a producer that keeps up still sends one
// batch at a time; a saturated producer far from the server (a network
// round trip per batch) gains the most. Per-key order holds across splits,
// merges and rebuckets at any setting (the server keeps the order of one
// connection's batches across a seal). With WithEpochRouting(true), one
// case is not covered above 1: a layout change that fails after its seal
// (the controller unseals the segment) may let a later batch of a key land
// while an earlier one, refused by the seal, is resent behind it.
func WithUnitPipeline(n int) ProducerOption {
	return producerOption(func(c *producerConfig) { c.unitPipeline = n })
}

// WithConsumerName names the consumer within its subscription (default: a
// random name). The name follows the name rule [A-Za-z0-9_-]{1,128}. A
// consumer that restarts under the same name before its session times out
// takes its units back at once.
func WithConsumerName(name string) ConsumerOption {
	return consumerOption(func(c *consumerConfig) { c.name = name })
}

// WithStart is where a new subscription begins: api.StartEarliest
// ("earliest", the default) or api.StartLatest ("latest"). It has no effect
// on a subscription that exists.
func WithStart(start string) ConsumerOption {
	return consumerOption(func(c *consumerConfig) { c.start = start })
}

// ReadCompactedOption is what WithReadCompacted returns: an option of
// stream and checkpoint consumers; NewQueueConsumer refuses it.
type ReadCompactedOption struct{}

func (ReadCompactedOption) applyConsumer(c *consumerConfig)     { c.readCompacted = true }
func (ReadCompactedOption) applyCheckpoint(c *checkpointConfig) { c.readCompacted = true }
func (ReadCompactedOption) applyQueue(c *queueConfig)           { c.readCompacted = true }

// WithReadCompacted makes a consumer read the topic's compacted view:
// below each unit's compaction horizon only the latest record of each key
// (at its own offset, so message ids do not change), then the log from
// there. A stream subscription reads it when the join that creates it
// asks; joining an existing subscription must ask as it was created.
func WithReadCompacted() ReadCompactedOption { return ReadCompactedOption{} }

// WithFetch sets the size of one fetch: at most max messages (default 256,
// at most 10,000) and about maxBytes of payload (default 1 MiB), and how
// long the server holds a fetch that finds nothing (default 1s, at most 30s).
func WithFetch(max, maxBytes int, wait time.Duration) ConsumerOption {
	return consumerOption(func(c *consumerConfig) { c.fetchMax, c.fetchMaxBytes, c.fetchWait = max, maxBytes, wait })
}

// WithSessionTimeout is how long the server waits without hearing from this
// consumer before it declares it dead and hands its units to others
// (default 10s). The consumer sends a heartbeat (an empty ack) when it has
// been silent for a third of it.
func WithSessionTimeout(d time.Duration) ConsumerOption {
	return consumerOption(func(c *consumerConfig) { c.sessionTimeout = d })
}

// WithAckInterval is how often batched acknowledgements are sent (default
// 20ms). Message.Ack only records the position; the highest position per
// unit goes out at the next interval, and on FlushAcks and Close.
func WithAckInterval(d time.Duration) ConsumerOption {
	return consumerOption(func(c *consumerConfig) { c.ackInterval = d })
}

// RequestTimeoutOption is WithRequestTimeout's option; it configures a
// Producer, a StreamConsumer and an Admin alike.
type RequestTimeoutOption time.Duration

func (o RequestTimeoutOption) applyProducer(c *producerConfig) { c.requestTimeout = time.Duration(o) }
func (o RequestTimeoutOption) applyConsumer(c *consumerConfig) { c.requestTimeout = time.Duration(o) }
func (o RequestTimeoutOption) applyAdmin(c *adminConfig)       { c.requestTimeout = time.Duration(o) }

// WithRequestTimeout bounds how long one request waits for its reply
// (default 5s): a produce batch, a describe, a join or ack, an admin call
// whose context has no deadline. A fetch waits its fetch wait on top.
func WithRequestTimeout(d time.Duration) RequestTimeoutOption { return RequestTimeoutOption(d) }

// TopicOption configures Admin.CreateTopic.
type TopicOption func(*api.TopicCreateRequest)

// WithTopicBuckets is the entry-bucket budget spread over the initial
// segments, at least one per segment (default: the namespace's
// entry_bucket_budget policy).
func WithTopicBuckets(n int) TopicOption {
	return func(r *api.TopicCreateRequest) { r.Buckets = n }
}

// WithTopicPolicies sets the topic's own policies; unset fields resolve from
// the namespace, then the broker default.
func WithTopicPolicies(p *api.Policies) TopicOption {
	return func(r *api.TopicCreateRequest) { r.Policies = p }
}
