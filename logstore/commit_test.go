package logstore

import (
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/wal"
)

// TestCommitterAcknowledgesDurableBatchesInOrder submits appends while the
// committer writes and commits, and checks every append is acknowledged
// once, with its offsets, in order, only once NextOffset (what is durable)
// covers it.
func TestCommitterAcknowledgesDurableBatchesInOrder(t *testing.T) {
	l, err := wal.Open(t.TempDir(), wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var mu sync.Mutex
	var acked []uint64
	durable := 0
	c := testCommitter(t, l, func() {
		mu.Lock()
		durable++
		mu.Unlock()
	})
	const submits, perReq = 100, 3
	for range submits {
		var reqs []testReq
		for range 2 {
			rs := make([]wal.Record, perReq)
			for i := range rs {
				rs[i] = wal.Record{Payload: []byte("x")}
			}
			reqs = append(reqs, testReq{records: rs, settle: func(first uint64, err error) {
				if err != nil {
					t.Error(err)
				}
				if next := l.NextOffset(); next < first+perReq {
					t.Errorf("acknowledged offsets %d.. before they were durable (next %d)", first, next)
				}
				mu.Lock()
				acked = append(acked, first)
				mu.Unlock()
			}})
		}
		c.Submit(reqs)
	}
	c.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(acked) != 2*submits {
		t.Fatalf("%d acknowledgements, want %d", len(acked), 2*submits)
	}
	for i, first := range acked {
		if first != uint64(i*perReq) {
			t.Fatalf("acknowledgement %d at offset %d, want %d", i, first, i*perReq)
		}
	}
	if durable == 0 {
		t.Fatal("onDurable never called")
	}
}

func TestCommitterFailsWhatCannotBeMadeDurable(t *testing.T) {
	l, err := wal.Open(t.TempDir(), wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Close() // the write finds the log closed
	c := testCommitter(t, l, nil)
	got := make(chan error, 1)
	c.Submit([]testReq{{records: make([]wal.Record, 1), settle: func(_ uint64, err error) { got <- err }}})
	c.Close()
	if err := <-got; !errors.Is(err, &api.Error{Code: api.CodeUnavailable}) {
		t.Fatalf("append whose commit failed: %v, want UNAVAILABLE", err)
	}
}

// testReq is a Request answered by settle.
type testReq struct {
	records []wal.Record
	settle  func(first uint64, err error)
}

func (q testReq) Records() []wal.Record                     { return q.records }
func (q testReq) Settle(_ UnitKey, first uint64, err error) { q.settle(first, err) }

// testCommitter is a committer of l, which it never reopens, in the
// group of a store syncing by fdatasync.
func testCommitter(t *testing.T, l *wal.Log, onDurable func()) *Committer[testReq] {
	s := New(t.TempDir(), Options{SyncMode: wal.SyncEach, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { _ = s.Close() })
	w := s.NewWriter(UnitKey{}, l, wal.Options{}, s.logger)
	return NewCommitter(UnitKey{}, w, GroupOf[testReq](s), s.logger, onDurable, nil)
}
