package actors

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
)

// produceOne sends one record and waits for its result.
func produceOne(t *testing.T, topic *Topic, key, payload string) api.Result {
	t.Helper()
	done := make(chan api.Result, 1)
	topic.Produce([]api.Record{{Key: []byte(key), Payload: []byte(payload)}}, func(r []api.Result) { done <- r[0] })
	select {
	case r := <-done:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("produce not answered")
		return api.Result{}
	}
}

// TestAckFenceRefusesAcknowledgements: while the fence refuses (the
// node's lease ran out), an append made durable is answered with the
// fence's error, not acknowledged; once it lets go, appends are
// acknowledged again.
func TestAckFenceRefusesAcknowledgements(t *testing.T) {
	var fenced atomic.Bool
	m := newTestManagerWith(t, func(c *Config) {
		c.AckFence = func() error {
			if fenced.Load() {
				return api.Errorf(api.CodeUnavailable, "lease ran out")
			}
			return nil
		}
	})
	topic := createTestTopic(t, m, "topic://t/n/fence", 1, 1)
	if r := produceOne(t, topic, "k", "a"); r.Code != 0 {
		t.Fatalf("unfenced: %+v", r)
	}
	fenced.Store(true)
	if r := produceOne(t, topic, "k", "b"); r.Code != api.CodeUnavailable.Number {
		t.Fatalf("fenced: %+v, want UNAVAILABLE", r)
	}
	fenced.Store(false)
	if r := produceOne(t, topic, "k", "c"); r.Code != 0 || r.Offset != 2 {
		t.Fatalf("after the fence: %+v, want offset 2 (the refused append is stored: at least once)", r)
	}
}

// TestRelocateSealsTheLostNodesSegments: Relocate seals, in metadata,
// the active segments the lost node owns and gives each a successor on
// the new node; a second call finds nothing left to move.
func TestRelocateSealsTheLostNodesSegments(t *testing.T) {
	m := newTestManagerWith(t, func(c *Config) { c.NodeID = "n1" })
	const uri = "topic://t/n/moved"
	if _, err := m.CreateTopicOn(context.Background(), api.TopicCreateRequest{Topic: uri, Segments: 2, Buckets: 1}, "n2"); err != nil {
		t.Fatal(err)
	}
	name, _ := routing.ParseTopic(uri)
	epoch, moved, err := m.Relocate(context.Background(), name, "n2", "n3")
	if err != nil || len(moved) != 2 {
		t.Fatalf("relocate: %v %v", moved, err)
	}
	rec, _, err := m.meta.Topic(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Layout.Epoch != epoch {
		t.Fatalf("stored epoch %d, relocate said %d", rec.Layout.Epoch, epoch)
	}
	for _, s := range rec.Layout.Segments {
		switch s.State {
		case topology.StateSealed:
			if s.Owner != "n2" || s.SealedEpoch != epoch {
				t.Fatalf("sealed %+v", s)
			}
		case topology.StateActive:
			if s.Owner != "n3" || len(s.Parents) != 1 {
				t.Fatalf("active %+v", s)
			}
		}
	}
	if _, again, err := m.Relocate(context.Background(), name, "n2", "n3"); err != nil || len(again) != 0 {
		t.Fatalf("second relocate moved %v (%v)", again, err)
	}
}

// TestMoveOutRefusesAppendsSealed: once MoveOut moved a topic to another
// node, an append through a handle taken before is refused SEGMENT_SEALED
// with the epoch of the move (the producer resends by the new layout),
// not failed; the sealed segments keep what was acknowledged before.
func TestMoveOutRefusesAppendsSealed(t *testing.T) {
	m := newTestManagerWith(t, func(c *Config) {
		c.NodeID = "n1"
		c.Owns = func(owner string) bool { return owner == "n1" || owner == "" }
	})
	const uri = "topic://t/n/drained"
	topic := createTestTopic(t, m, uri, 2, 1)
	if r := produceOne(t, topic, "k", "before"); r.Code != 0 {
		t.Fatalf("before the move: %+v", r)
	}
	name, _ := routing.ParseTopic(uri)
	epoch, moved, err := m.MoveOut(context.Background(), name, "n2")
	if err != nil || len(moved) != 2 {
		t.Fatalf("move out: %v %v", moved, err)
	}
	r := produceOne(t, topic, "k", "after")
	if r.Code != api.CodeSegmentSealed.Number {
		t.Fatalf("after the move: %+v, want SEGMENT_SEALED", r)
	}
	if e := r.Err(); e == nil || api.AsError(e).Epoch != epoch {
		t.Fatalf("after the move: %v, want the epoch %d of the move", e, epoch)
	}
	if _, err := m.Topic(uri); err == nil {
		t.Fatal("the moved topic activated again here")
	}
}
