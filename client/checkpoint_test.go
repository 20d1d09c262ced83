package client_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
)

// readN reads n messages with c, checking per-key order, and returns their
// sequence numbers.
func readN(t *testing.T, c *client.CheckpointConsumer, n int, last map[string]int) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out []int
	for len(out) < n {
		m, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("next after %d of %d: %v", len(out), n, err)
		}
		seq, _ := strconv.Atoi(string(m.Payload))
		if prev, ok := last[string(m.Key)]; ok && prev >= seq {
			t.Fatalf("key %s: %d after %d", m.Key, seq, prev)
		}
		last[string(m.Key)] = seq
		out = append(out, seq)
	}
	return out
}

func TestCheckpointConsumerRestoresAcrossASplit(t *testing.T) {
	node, nc := startNode(t)
	const uri = "topic://public/default/cp"
	createTopic(t, nc, uri, 1, 2)
	p, err := client.NewProducer(nc, uri)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(t.Context())
	sendAll(t, p, 300, 20, nil)

	c, err := client.NewCheckpointConsumer(nc, uri, client.WithFetch(50, 1<<20, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first := readN(t, c, 120, map[string]int{})
	cp := c.Checkpoint()
	text := cp.String()

	// Split while the consumer is behind, then produce more.
	if _, err := client.NewAdmin(nc).Split(t.Context(), uri, 0, nil); err != nil {
		t.Fatal(err)
	}
	for i := 300; i < 500; i++ {
		if err := p.Send(t.Context(), keyedRec(i, 20), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	readN(t, c, 50, map[string]int{}) // read past the checkpoint, then go back

	back, err := client.ParseCheckpoint(text)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := client.NewCheckpointConsumer(nc, uri, client.WithFetch(50, 1<<20, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.Restore(t.Context(), back); err != nil {
		t.Fatal(err)
	}
	last := map[string]int{}
	for _, s := range first {
		k := "key-" + strconv.Itoa(s%20)
		last[k] = max(last[k], s)
	}
	rest := readN(t, c2, 380, last)
	seen := map[int]bool{}
	for _, s := range append(first, rest...) {
		if seen[s] {
			t.Fatalf("%d read twice", s)
		}
		seen[s] = true
	}
	if len(seen) != 500 {
		t.Fatalf("read %d distinct of 500", len(seen))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if m, err := c2.Next(ctx); err == nil {
		t.Fatalf("a 501st message: %+v", m)
	}

	// Retention deletes the sealed parent: the old checkpoint now points into
	// data that is gone.
	if _, err := node.Topics().Change(t.Context(), uri, topology.Delete(0)); err != nil {
		t.Fatal(err)
	}
	if err := c2.Restore(t.Context(), back); err != nil {
		t.Fatal(err)
	}
	_, err = c2.Next(t.Context())
	var gone *client.SegmentGoneError
	if !errors.As(err, &gone) || gone.Segment != 0 || gone.Bucket != -1 || !errors.Is(err, client.ErrDataGone) {
		t.Fatalf("next after the segment was deleted: %v", err)
	}
	var skipped []*client.SegmentGoneError
	c3, err := client.NewCheckpointConsumer(nc, uri, client.WithSkipGone(func(e *client.SegmentGoneError) { skipped = append(skipped, e) }))
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if err := c3.Restore(t.Context(), back); err != nil {
		t.Fatal(err)
	}
	after := readN(t, c3, 200, map[string]int{})
	if len(skipped) != 1 || skipped[0].Segment != 0 || len(after) != 200 {
		t.Fatalf("skipped %v, then read %d", skipped, len(after))
	}
}

func keyedRec(seq, keys int) api.Record {
	return api.Record{Key: []byte("key-" + strconv.Itoa(seq%keys)), Payload: []byte(strconv.Itoa(seq))}
}

func TestCheckpointConsumerStartsAtLatestAndAtATime(t *testing.T) {
	_, nc := startNode(t)
	const uri = "topic://public/default/cpstart"
	createTopic(t, nc, uri, 2, 2)
	p, err := client.NewProducer(nc, uri)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(t.Context())
	t0 := time.Now()
	for i := range 100 {
		rec := keyedRec(i, 10)
		rec.Time = t0.Add(time.Duration(i) * time.Second).UnixMilli()
		if err := p.Send(t.Context(), rec, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	latest, err := client.NewCheckpointConsumer(nc, uri, client.WithStart(api.StartLatest))
	if err != nil {
		t.Fatal(err)
	}
	defer latest.Close()
	at, err := client.NewCheckpointConsumer(nc, uri, client.WithStartTime(t0.Add(60*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	defer at.Close()
	got := readN(t, at, 40, map[string]int{})
	for _, s := range got {
		if s < 60 {
			t.Fatalf("start at 60s read %d", s)
		}
	}
	if err := p.Send(t.Context(), api.Record{Key: []byte("new"), Payload: []byte("100")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, latest, 1, map[string]int{}); got[0] != 100 {
		t.Fatalf("latest read %v", got)
	}
	if cp := latest.Checkpoint(); len(cp.Positions) == 0 || cp.Topic != uri {
		t.Fatalf("checkpoint %+v", cp)
	}
}

func TestCheckpointConsumerReportsOffsetsRemovedByRetention(t *testing.T) {
	node, nc := startNode(t)
	const uri = "topic://public/default/trimmed"
	createTopic(t, nc, uri, 1, 1)
	p, err := client.NewProducer(nc, uri)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(t.Context())
	sendAll(t, p, 100, 5, nil)
	c, err := client.NewCheckpointConsumer(nc, uri)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	readN(t, c, 10, map[string]int{})
	cp := c.Checkpoint()

	// Retention removes offsets 0 to 49 of the only unit.
	name, err := routing.ParseTopic(uri)
	if err != nil {
		t.Fatal(err)
	}
	l, err := node.Topics().Store().Log(actors.UnitKey{Topic: name, Segment: 0, Bucket: 0}, wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.TruncateHead(50); err != nil {
		t.Fatal(err)
	}
	if err := c.Restore(t.Context(), cp); err != nil {
		t.Fatal(err)
	}
	_, err = c.Next(t.Context())
	var gone *client.SegmentGoneError
	if !errors.As(err, &gone) || gone.Segment != 0 || gone.Bucket != 0 || gone.Offset != 10 || gone.First != 50 {
		t.Fatalf("next after retention: %v (%+v)", err, gone)
	}
	if _, again := c.Next(t.Context()); !errors.As(again, &gone) {
		t.Fatalf("the second next skipped the gap silently: %v", again)
	}

	var skipped []*client.SegmentGoneError
	s, err := client.NewCheckpointConsumer(nc, uri, client.WithSkipGone(func(e *client.SegmentGoneError) { skipped = append(skipped, e) }))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Restore(t.Context(), cp); err != nil {
		t.Fatal(err)
	}
	got := readN(t, s, 50, map[string]int{})
	if got[0] != 50 || len(skipped) != 1 || skipped[0].First != 50 {
		t.Fatalf("after skipping: first %d, skipped %+v", got[0], skipped)
	}
	if cp := s.Checkpoint(); len(cp.Positions) != 1 || cp.Positions[0].Offset != 100 {
		t.Fatalf("checkpoint after reading to the end: %+v", cp)
	}
}
