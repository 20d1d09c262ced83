package actors

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
	c := newCommitter(UnitKey{}, testWriter(l), testGroup(t), slog.New(slog.NewTextHandler(io.Discard, nil)), func() {
		mu.Lock()
		durable++
		mu.Unlock()
	})
	const submits, perReq = 100, 3
	for range submits {
		var reqs []appendReq
		for range 2 {
			rs := make([]wal.Record, perReq)
			for i := range rs {
				rs[i] = wal.Record{Payload: []byte("x")}
			}
			reqs = append(reqs, appendReq{records: rs, sink: sinkFunc(func(_ unitRef, first uint64, err error) {
				if err != nil {
					t.Error(err)
				}
				if next := l.NextOffset(); next < first+perReq {
					t.Errorf("acknowledged offsets %d.. before they were durable (next %d)", first, next)
				}
				mu.Lock()
				acked = append(acked, first)
				mu.Unlock()
			})})
		}
		c.submit(reqs)
	}
	c.close()
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
	c := newCommitter(UnitKey{}, testWriter(l), testGroup(t), slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	got := make(chan error, 1)
	c.submit([]appendReq{{records: make([]wal.Record, 1), sink: sinkFunc(func(_ unitRef, _ uint64, err error) { got <- err })}})
	c.close()
	if err := <-got; !errors.Is(err, &api.Error{Code: api.CodeUnavailable}) {
		t.Fatalf("append whose commit failed: %v, want UNAVAILABLE", err)
	}
}

// sinkFunc is an appendSink for appends of one part.
type sinkFunc func(u unitRef, first uint64, err error)

func (f sinkFunc) landed(u unitRef, _ []int, first uint64, err error) { f(u, first, err) }
func (f sinkFunc) splitInto(int)                                      {}

// testWriter is a unitWriter over l that never reopens it (no store).
func testWriter(l *wal.Log) *unitWriter {
	return newUnitWriter(UnitKey{}, l, nil, wal.Options{}, slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics(nil))
}

// testGroup is a groupCommitter syncing by fdatasync.
func testGroup(t *testing.T) *groupCommitter {
	g, err := wal.NewCommitGroup(t.TempDir(), wal.SyncEach, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return newGroupCommitter(g, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
}
