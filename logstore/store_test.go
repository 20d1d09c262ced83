package logstore

import (
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/wal"
)

// Many logs open at once, and the same log asked for by many callers at
// once: each caller of a unit gets the one log opened for it. A topic
// closed while its logs open waits for them (run with -race).
func TestStoreOpensLogsAtOnce(t *testing.T) {
	s := New(t.TempDir(), Options{SyncMode: wal.SyncEach, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer s.Close()
	topic, err := routing.ParseTopic("topic://t/n/many")
	if err != nil {
		t.Fatal(err)
	}
	const units, callers = 40, 4
	got := make([][]*wal.Log, units)
	for u := range got {
		got[u] = make([]*wal.Log, callers)
	}
	var wg sync.WaitGroup
	for u := range units {
		for c := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := s.Log(UnitKey{Topic: topic, Segment: 0, Bucket: u}, wal.Options{Durability: wal.DurabilityAlways})
				if err != nil {
					t.Error(err)
					return
				}
				got[u][c] = l
			}()
		}
	}
	wg.Wait()
	for u := range units {
		for c := 1; c < callers; c++ {
			if got[u][c] != got[u][0] {
				t.Fatalf("unit %d: callers got different logs: it was opened twice", u)
			}
		}
	}
	if n := s.OpenLogs(); n != units {
		t.Fatalf("%d logs open, want %d", n, units)
	}
	// A topic closed while its logs are being opened.
	other, _ := routing.ParseTopic("topic://t/n/closed")
	for u := range units {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = s.Log(UnitKey{Topic: other, Segment: 0, Bucket: u}, wal.Options{Durability: wal.DurabilityAlways})
		}()
	}
	if err := s.CloseTopic(other); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := s.CloseTopic(other); err != nil {
		t.Fatal(err)
	}
	if n := s.OpenLogs(); n != units {
		t.Fatalf("%d logs open after the other topic closed, want %d", n, units)
	}
}
