package client

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
)

// TestProducerSendsStraightToTheOwner: with a layout that names an owner,
// the producer's requests go to that node's direct subject.
func TestProducerSendsStraightToTheOwner(t *testing.T) {
	f, nc := newFake(t, 2, 2)
	f.owner = "n7"
	var direct atomic.Int64
	if _, err := f.nc.Subscribe(api.DirectSubject("n7", api.ProduceMultiPrefix+".t"), func(m *nats.Msg) {
		direct.Add(1)
		f.produceMulti(m)
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	sendKeyed(t, nc, 200)
	if direct.Load() == 0 {
		t.Fatal("no request reached the owner's direct subject")
	}
	f.mu.Lock()
	got := f.requests
	f.mu.Unlock()
	if got != int(direct.Load()) {
		t.Fatalf("%d requests, %d of them direct: some went through another node", got, direct.Load())
	}
}

// TestProducerFallsBackWhenTheOwnerIsGone: requests sent straight to an
// owner nobody serves find no responder; the producer sends them again
// through any node, in key order, and reports no error.
func TestProducerFallsBackWhenTheOwnerIsGone(t *testing.T) {
	f, nc := newFake(t, 2, 2)
	f.owner = "gone"
	sendKeyed(t, nc, 500)
	for key, seqs := range f.keyOrder() {
		for i := 1; i < len(seqs); i++ {
			if seqs[i] < seqs[i-1] {
				t.Fatalf("key %s out of order: %v", key, seqs)
			}
		}
	}
}

// sendKeyed sends n records over 8 keys with sequence-numbered payloads
// and waits until every one is acknowledged without error.
func sendKeyed(t *testing.T, nc *nats.Conn, n int) {
	t.Helper()
	p, err := NewProducer(nc, fakeURI)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var failed atomic.Int64
	for i := range n {
		rec := api.Record{Key: []byte(fmt.Sprintf("k%d", i%8)), Payload: []byte(fmt.Sprintf("%06d", i))}
		if err := p.Send(ctx, rec, func(_ MessageID, err error) {
			if err != nil {
				failed.Add(1)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if failed.Load() > 0 {
		t.Fatalf("%d of %d records failed", failed.Load(), n)
	}
}

// TestProducerWaitsForANodeToTakeItsBatches: while no node takes produce
// requests (the entry role is moving, or the owner a node forwards to is
// gone), the producer sends its batches again a moment later, until its
// request timeout, and reports no error once a node takes them.
func TestProducerWaitsForANodeToTakeItsBatches(t *testing.T) {
	f, nc := newFake(t, 2, 2)
	p, err := NewProducer(nc, fakeURI, WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.produceSub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var failed, acked atomic.Int64
	for i := range 100 {
		rec := api.Record{Key: []byte(fmt.Sprintf("k%d", i%8)), Payload: []byte(fmt.Sprintf("%06d", i))}
		if err := p.Send(ctx, rec, func(_ MessageID, err error) {
			if err != nil {
				failed.Add(1)
			} else {
				acked.Add(1)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Eventually(t, 10*time.Second, "a request that no node took, to be sent again", func() bool {
		p.mux.mu.Lock()
		defer p.mux.mu.Unlock()
		return !p.mux.retryAt.IsZero()
	})
	if failed.Load() > 0 {
		t.Fatalf("%d records failed while no node took them", failed.Load())
	}
	s, err := f.nc.Subscribe(api.ProduceMultiPrefix+".t", f.produceMulti)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Unsubscribe()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if failed.Load() > 0 || acked.Load() != 100 {
		t.Fatalf("%d failed, %d acknowledged of 100", failed.Load(), acked.Load())
	}
	for key, seqs := range f.keyOrder() {
		for i := 1; i < len(seqs); i++ {
			if seqs[i] < seqs[i-1] {
				t.Fatalf("key %s out of order: %v", key, seqs)
			}
		}
	}
}
