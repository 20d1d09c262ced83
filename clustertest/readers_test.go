package clustertest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
)

// The checker's readers: after a fault, a fresh stream subscription and
// a checkpoint reader (no subscription, no state on the server: it
// follows the layout and reads the units itself) each read the topic
// from the earliest, and each must read every acknowledged message once,
// in its key's order.

// verdict is what a fresh reader found of a run's acknowledged messages.
type verdict struct {
	acked, lost, duplicated, reordered, unexpected int
	// resentTwice counts the seqs a plain producer resent after an
	// outcome it could not know that were stored more than once, each
	// copy next to the other (what its contract allows: docs/wire.md).
	resentTwice int
	// acksLost counts messages a stream subscription had acknowledged
	// (its acks stored) before the fault that it got again after.
	acksLost    int
	acksChecked bool
	lostSeqs    []int
	// examples of what went wrong (a few of each).
	examples []string
}

func (v *verdict) example(format string, args ...any) {
	if len(v.examples) < 12 {
		v.examples = append(v.examples, fmt.Sprintf(format, args...))
	}
}

// add adds what reader found (another reader of the same run) to v.
func (v *verdict) add(reader string, w verdict) {
	v.lost += w.lost
	v.duplicated += w.duplicated
	v.reordered += w.reordered
	v.unexpected += w.unexpected
	v.resentTwice = max(v.resentTwice, w.resentTwice)
	v.lostSeqs = append(v.lostSeqs, w.lostSeqs...)
	for _, e := range w.examples {
		v.example("%s: %s", reader, e)
	}
}

// judge tells, read by read, what a reader found of a ledger's seqs.
type judge struct {
	acked, unknown map[int]bool
	tried          map[int]int
	seen           map[int]int
	last           map[string]int
	missing        int // acknowledged, not read yet
	v              verdict
}

// newJudge judges reads against what l says now.
func newJudge(l *ledger) *judge {
	l.mu.Lock()
	defer l.mu.Unlock()
	j := &judge{acked: maps.Clone(l.acked), unknown: maps.Clone(l.unknown), tried: maps.Clone(l.tried),
		seen: map[int]int{}, last: map[string]int{}}
	j.missing, j.v.acked = len(j.acked), len(j.acked)
	return j
}

// read takes one message read, in the order read.
func (j *judge) read(key, payload []byte) {
	seq, err := strconv.Atoi(string(payload))
	if err != nil || j.tried[seq] == 0 {
		j.v.unexpected++
		return
	}
	j.seen[seq]++
	if j.seen[seq] == 1 && j.acked[seq] {
		j.missing--
	}
	k := string(key)
	if prev, ok := j.last[k]; ok && prev >= seq && !(prev == seq && j.unknown[seq] && j.seen[seq] <= j.tried[seq]) {
		j.v.reordered++
		j.v.example("key %s: %d (read %d times, outcome unknown %v) after %d (outcome unknown %v)", k, seq, j.seen[seq], j.unknown[seq], prev, j.unknown[prev])
	}
	j.last[k] = seq
}

// verdict says what was lost (acknowledged, never read), duplicated (read
// twice, but a seq of unknown outcome twice in a row), reordered (a key's
// seqs read out of order) or unexpected (never sent).
func (j *judge) verdict() verdict {
	v := j.v
	for seq, n := range j.seen {
		switch {
		case n > 1 && j.unknown[seq] && n <= j.tried[seq]:
			v.resentTwice++
		case n > 1:
			v.duplicated++
			v.example("seq %d read %d times, sent %d times (outcome unknown %v)", seq, n, j.tried[seq], j.unknown[seq])
		}
	}
	for seq := range j.acked {
		if j.seen[seq] == 0 {
			v.lost++
			v.lostSeqs = append(v.lostSeqs, seq)
		}
	}
	sort.Ints(v.lostSeqs)
	return v
}

// retryable says whether a reader's error is one to try again after
// (client.StreamConsumer.Next: calling it again retries): the topic
// unavailable a moment, or moving to another node (its segments sealed).
func retryable(err error) bool {
	return errors.Is(err, api.ErrUnavailable) || errors.Is(err, client.ErrTimeout) || errors.Is(err, api.ErrSegmentSealed)
}

// check reads topic uri through nc from the earliest, with a fresh stream
// subscription (sub) and with a checkpoint reader, each until every
// acknowledged seq of l came or two minutes passed, and says what they
// found (verdict: what either lost, duplicated, reordered or did not
// expect).
func check(nc *nats.Conn, uri, sub string, l *ledger) verdict {
	GinkgoHelper()
	v := readStream(nc, uri, sub, newJudge(l), nil)
	v.add("checkpoint reader", readCheckpoint(nc, uri, newJudge(l)))
	return v
}

// joined retries join while the cluster settles (the metadata store
// electing again once a node is back, the nodes' leases renewed late,
// topics moved), up to two minutes, and says how long it waited.
func joined[C any](what string, join func() (C, error)) C {
	GinkgoHelper()
	var c C
	joining := time.Now()
	Eventually(func() error {
		var err error
		c, err = join()
		if err != nil && !retryable(err) {
			StopTrying(what).Wrap(err).Now()
		}
		return err
	}).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	if waited := time.Since(joining); waited > 5*time.Second {
		fmt.Fprintf(GinkgoWriter, "the reader waited %s to %s\n", waited.Round(time.Second), what)
	}
	return c
}

// readStream reads with stream subscription sub (a fresh one, or one
// joined again), acknowledging what it reads; skip, if set, takes a
// message out of the judge's sight (and says so).
func readStream(nc *nats.Conn, uri, sub string, j *judge, skip func(*client.Message) bool) verdict {
	GinkgoHelper()
	c := joined("join "+sub, func() (*client.StreamConsumer, error) {
		return client.NewStreamConsumer(nc, uri, sub, client.WithFetch(200, 1<<20, 100*time.Millisecond))
	})
	defer func() { _ = c.Close(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for j.missing > 0 && ctx.Err() == nil {
		m, err := c.Next(ctx)
		if err != nil {
			if retryable(err) && ctx.Err() == nil {
				continue
			}
			break
		}
		if skip != nil && skip(m) {
			continue
		}
		j.read(m.Key, m.Payload)
		m.Ack()
	}
	return j.verdict()
}

// readCheckpoint reads with a checkpoint reader: no subscription, no
// state on the server.
func readCheckpoint(nc *nats.Conn, uri string, j *judge) verdict {
	GinkgoHelper()
	c := joined("start a checkpoint reader", func() (*client.CheckpointConsumer, error) {
		return client.NewCheckpointConsumer(nc, uri)
	})
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for j.missing > 0 && ctx.Err() == nil {
		m, err := c.Next(ctx)
		if err != nil {
			if retryable(err) && ctx.Err() == nil {
				continue
			}
			j.v.example("the checkpoint reader stopped: %v", err)
			break
		}
		j.read(m.Key, m.Payload)
	}
	return j.verdict()
}

// expectClean fails on a verdict with anything lost, duplicated,
// reordered or unexpected.
func expectClean(v verdict) {
	GinkgoHelper()
	Expect(v.lost).To(BeZero(), "acknowledged and never read: %v (%v)", v.lostSeqs, v.examples)
	Expect(v.duplicated).To(BeZero(), "read more often than sent: %v", v.examples)
	Expect(v.reordered).To(BeZero(), "read out of key order: %v", v.examples)
	Expect(v.unexpected).To(BeZero(), "read what was never sent")
	Expect(v.acksLost).To(BeZero(), "messages a subscription had acknowledged (its acks stored) delivered again after the fault")
}

// consumerAcks is what a stream subscription acknowledged before a fault,
// its acks flushed (the server said they were stored): per unit, the
// offset before which every message is acknowledged (acks are cumulative
// per unit), and the seqs of those messages.
type consumerAcks struct {
	next map[client.MessageID]uint64 // keyed by segment and bucket (offset 0)
	seqs map[int]bool
}

// ackBefore reads up to n messages of topic uri with stream subscription
// sub through nc, acknowledges them and flushes the acks.
func ackBefore(nc *nats.Conn, uri, sub string, n int) consumerAcks {
	GinkgoHelper()
	a := consumerAcks{next: map[client.MessageID]uint64{}, seqs: map[int]bool{}}
	c := joined("join "+sub, func() (*client.StreamConsumer, error) {
		return client.NewStreamConsumer(nc, uri, sub, client.WithFetch(100, 1<<20, 100*time.Millisecond))
	})
	defer func() { _ = c.Close(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pending := map[client.MessageID]uint64{}
	for read := 0; read < n && ctx.Err() == nil; {
		m, err := c.Next(ctx)
		if err != nil {
			if retryable(err) {
				continue
			}
			break
		}
		read++
		m.Ack()
		u := client.MessageID{Segment: m.ID.Segment, Bucket: m.ID.Bucket}
		pending[u] = max(pending[u], m.ID.Offset+1)
		if seq, err := strconv.Atoi(string(m.Payload)); err == nil {
			a.seqs[seq] = true
		}
	}
	Eventually(func() error { return c.FlushAcks(ctx) }).WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).
		Should(Succeed(), "the acks of %s not stored", sub)
	a.next = pending
	return a
}

// acksHeld rejoins subscription sub after a fault and reads it until
// every message l acknowledged and a did not came (or two minutes
// passed), and counts the messages a had acknowledged that came again:
// acknowledged consumer acks lost. What it did not read of the others is
// lost too (w: lost, duplicated, reordered as check's readers judge).
func acksHeld(nc *nats.Conn, uri, sub string, l *ledger, a consumerAcks) (lost int, w verdict) {
	GinkgoHelper()
	j := newJudge(l)
	for seq := range a.seqs {
		if j.acked[seq] {
			delete(j.acked, seq)
			j.missing--
		}
	}
	w = readStream(nc, uri, sub, j, func(m *client.Message) bool {
		if m.ID.Offset < a.next[client.MessageID{Segment: m.ID.Segment, Bucket: m.ID.Bucket}] {
			lost++
			return true
		}
		return false
	})
	return lost, w
}
