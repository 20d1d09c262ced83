package client

import (
	"time"

	"github.com/braidmq/braid/api"
)

// QueueOption configures NewQueueConsumer. The stream consumer's options
// (WithConsumerName, WithStart, WithFetch, WithSessionTimeout,
// WithAckInterval, WithRequestTimeout) configure a QueueConsumer too.
type QueueOption interface{ applyQueue(*queueConfig) }

// CheckpointOption configures NewCheckpointConsumer. WithStart, WithFetch
// and WithRequestTimeout configure a CheckpointConsumer too; the other
// stream consumer options concern subscriptions and have no effect on it.
type CheckpointOption interface{ applyCheckpoint(*checkpointConfig) }

func (f consumerOption) applyQueue(c *queueConfig)           { f(&c.consumerConfig) }
func (f consumerOption) applyCheckpoint(c *checkpointConfig) { f(&c.consumerConfig) }
func (o RequestTimeoutOption) applyQueue(c *queueConfig)     { c.requestTimeout = time.Duration(o) }
func (o RequestTimeoutOption) applyCheckpoint(c *checkpointConfig) {
	c.requestTimeout = time.Duration(o)
}

// queueConfig holds a QueueConsumer's settings: a stream consumer's, and the
// subscription policy it sets (nil or "": leave the subscription's as is).
type queueConfig struct {
	consumerConfig
	ackTimeout      *time.Duration
	maxDeliveries   *int
	deadLetterTopic string
	nackDelay       *time.Duration
	nackBackoff     *float64
	maxNackDelay    *time.Duration
}

func (c *queueConfig) validate() error {
	if c.readCompacted {
		return invalid("WithReadCompacted: a queue subscription does not read the compacted view (use a stream or checkpoint consumer)")
	}
	if err := c.consumerConfig.validate(); err != nil {
		return err
	}
	switch {
	case c.ackTimeout != nil && (*c.ackTimeout < 0 || (*c.ackTimeout > 0 && *c.ackTimeout < minSessionTimeout) || *c.ackTimeout > maxQueueDelay):
		return invalid("WithAckTimeout(%s): want 0 (none) or %s to %s", *c.ackTimeout, minSessionTimeout, maxQueueDelay)
	case c.maxDeliveries != nil && (*c.maxDeliveries < 0 || *c.maxDeliveries > 1_000_000):
		return invalid("WithMaxDeliveries(%d): want 0 (unlimited) to 1000000", *c.maxDeliveries)
	case c.nackDelay != nil && (*c.nackDelay < 0 || *c.nackDelay > maxQueueDelay):
		return invalid("WithNackDelay(%s): want 0 to %s", *c.nackDelay, maxQueueDelay)
	case c.maxNackDelay != nil && (*c.maxNackDelay < 0 || *c.maxNackDelay > maxQueueDelay):
		return invalid("WithNackBackoff: max %s, want 0 to %s", *c.maxNackDelay, maxQueueDelay)
	case c.nackBackoff != nil && (*c.nackBackoff < 1 || *c.nackBackoff > 1000):
		return invalid("WithNackBackoff: multiplier %v, want 1 (fixed) to 1000", *c.nackBackoff)
	}
	if c.deadLetterTopic != "" {
		if _, err := parseTopic(c.deadLetterTopic); err != nil {
			return invalid("WithDeadLetterTopic(%q): %v", c.deadLetterTopic, err)
		}
	}
	return nil
}

// policy copies the policy settings into a join request.
func (c *queueConfig) policy(req *api.QueueJoinRequest) {
	if c.ackTimeout != nil {
		req.AckTimeout = c.ackTimeout.String()
	}
	req.MaxDeliveries = c.maxDeliveries
	req.DeadLetterTopic = c.deadLetterTopic
	if c.nackDelay != nil {
		req.NackDelay = c.nackDelay.String()
	}
	req.NackBackoff = c.nackBackoff
	if c.maxNackDelay != nil {
		req.MaxNackDelay = c.maxNackDelay.String()
	}
}

const maxQueueDelay = 24 * time.Hour

type queueOption func(*queueConfig)

func (f queueOption) applyQueue(c *queueConfig) { f(c) }

// WithAckTimeout is how long a delivered message may stay unanswered before
// the server delivers it again (default 30s; 0 disables it: only a nack, or
// the consumer leaving or dying, delivers a message again).
func WithAckTimeout(d time.Duration) QueueOption {
	return queueOption(func(c *queueConfig) { c.ackTimeout = &d })
}

// WithMaxDeliveries is how often a message may be delivered (default 0:
// unlimited). A message that would be delivered once more goes to the
// dead-letter topic instead and is acknowledged.
func WithMaxDeliveries(n int) QueueOption {
	return queueOption(func(c *queueConfig) { c.maxDeliveries = &n })
}

// WithDeadLetterTopic names the dead-letter topic (default
// topic://<tenant>/<namespace>/<name>-dlq); it is created on first use.
func WithDeadLetterTopic(uri string) QueueOption {
	return queueOption(func(c *queueConfig) { c.deadLetterTopic = uri })
}

// WithNackDelay is the redelivery delay of QueueMessage.Nack (default 1s):
// a fixed delay, unless WithNackBackoff makes it grow.
func WithNackDelay(d time.Duration) QueueOption {
	return queueOption(func(c *queueConfig) { c.nackDelay = &d })
}

// WithNackBackoff makes the nack delay grow exponentially: after the n-th
// delivery it is the nack delay times multiplier^(n-1), at most max.
func WithNackBackoff(multiplier float64, max time.Duration) QueueOption {
	return queueOption(func(c *queueConfig) { c.nackBackoff, c.maxNackDelay = &multiplier, &max })
}

// checkpointConfig holds a CheckpointConsumer's settings.
type checkpointConfig struct {
	consumerConfig
	startTime time.Time
	// skipGone, when set, makes the consumer skip data retention removed
	// and report it there instead of failing.
	skipGone func(*SegmentGoneError)
}

func (c *checkpointConfig) validate() error {
	return c.consumerConfig.validate()
}

type checkpointOption func(*checkpointConfig)

func (f checkpointOption) applyCheckpoint(c *checkpointConfig) { f(c) }

// WithStartTime starts a CheckpointConsumer at the first message of each
// unit whose time is at or after t (see api.OffsetsRequest for producers
// that set Braid-Time out of order). It overrides WithStart.
func WithStartTime(t time.Time) CheckpointOption {
	return checkpointOption(func(c *checkpointConfig) { c.startTime = t })
}

// WithSkipGone makes a CheckpointConsumer skip ahead over data that
// retention removed before it was read (a deleted segment, offsets below a
// unit's first retained one), or that the server lost to damage, instead of
// failing Next with a *SegmentGoneError. report, when not nil, is told of every skip, from the
// goroutine calling Next.
func WithSkipGone(report func(*SegmentGoneError)) CheckpointOption {
	return checkpointOption(func(c *checkpointConfig) {
		c.skipGone = report
		if report == nil {
			c.skipGone = func(*SegmentGoneError) {}
		}
	})
}
