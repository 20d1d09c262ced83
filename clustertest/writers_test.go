package clustertest

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
)

// The fault suite's writers: plain NATS clients that resend what they
// could not know the outcome of, and the Go producer, which never resends.

// writeThrough starts the writers of a fault's run: the plain writers
// "spared" (keys k*) through node spared and "victim" (keys m*) through
// node victim, and the Go producer "go" (keys g*) through node spared.
// stop stops them and waits (once; later calls do nothing).
func writeThrough(c *chaosCluster, uri string, spared, victim int) (l *ledger, stop func()) {
	l = newLedger()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		goWriter(c.conns[spared], uri, "go", "g", 2_000_000, 3_000_000, l, done)
	}()
	go func() {
		defer wg.Done()
		plainWriter(c.conns[spared], uri, "spared", "k", 0, 1_000_000, time.Second, l, done)
	}()
	go func() {
		defer wg.Done()
		plainWriter(c.conns[victim], uri, "victim", "m", 1_000_000, 2_000_000, time.Second, l, done)
	}()
	var once sync.Once
	return l, func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
}

// plainWriter sends seqs [from, to) one at a time as single-message
// requests of a plain NATS client through nc, keyed prefix0..prefix7,
// each request waiting up to timeout for its answer, resending a seq
// whose outcome it could not know until it is acknowledged or stop
// closes, and records every outcome in l under name.
func plainWriter(nc *nats.Conn, uri, name, prefix string, from, to int, timeout time.Duration, l *ledger, stop <-chan struct{}) {
	subject := produceSubject(uri)
	for seq := from; seq < to; seq++ {
		m := &nats.Msg{Subject: subject, Header: nats.Header{api.HeaderKey: []string{prefix + strconv.Itoa(seq%8)}}, Data: []byte(strconv.Itoa(seq))}
		for {
			select {
			case <-stop:
				return
			default:
			}
			l.try(seq)
			reply, err := nc.RequestMsg(m, timeout)
			if err == nil && reply.Header.Get(micro.ErrorCodeHeader) == "" {
				l.ack(name, seq)
				break
			}
			switch code := ""; {
			case errors.Is(err, nats.ErrNoResponders):
				// Nothing took it: not stored.
			case err != nil:
				l.maybe(seq)
			default:
				code = reply.Header.Get(micro.ErrorCodeHeader)
				if code == strconv.Itoa(api.CodeUnavailable.Number) {
					l.maybe(seq)
				}
				// SEGMENT_SEALED and the like: nothing stored.
			}
			// Polled: a refused request is sent again at once but for a
			// breath, so a cut-off node's refusals do not spin.
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

// goWriter sends seqs [from, to) through the Go producer over nc, keyed
// prefix0..prefix7, a record every 2 ms, until stop closes, and records
// every outcome in l under name: acknowledged, or not known (the producer
// reports an error and never resends: the record may have been stored,
// once). Each seq is sent once: read twice is a duplicate, whatever the
// faults. A producer that fails for good (its connection's server killed)
// is made again.
func goWriter(nc *nats.Conn, uri, name, prefix string, from, to int, l *ledger, stop <-chan struct{}) {
	var p *client.Producer
	defer func() {
		if p != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = p.Close(ctx) // the callbacks of what is in flight run first
		}
	}()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for seq := from; seq < to; {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if p == nil {
			var err error
			if p, err = client.NewProducer(nc, uri); err != nil {
				p = nil
				continue
			}
		}
		s := seq
		l.try(s)
		rec := api.Record{Key: []byte(prefix + strconv.Itoa(s%8)), Payload: []byte(strconv.Itoa(s))}
		err := p.Send(context.Background(), rec, func(_ client.MessageID, err error) {
			if err != nil {
				l.maybe(s)
				return
			}
			l.ack(name, s)
		})
		if err != nil {
			// Not queued (the producer failed for good): nothing sent.
			l.untry(s)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = p.Close(ctx)
			cancel()
			p = nil
			continue
		}
		seq++
	}
}
