package consumers

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/braidmq/braid/wal"
)

// TestLocalLogsWithoutCreateOpenOnlyALog: a group opened without create
// gets no log when its directory holds none — also when the directory
// exists, holding only the replicated generations a deleted subscription
// of the same name left there (a log opened then kept a new
// subscription's state on one node, unreplicated: found by the cluster
// spec of a subscription deleted and made again) — and its log when it
// has one.
func TestLocalLogsWithoutCreateOpenOnlyALog(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "again")
	if err := os.MkdirAll(filepath.Join(dir, "r1796661913752933"), 0o750); err != nil {
		t.Fatal(err)
	}
	l, _, err := LocalLogs{}.Open(LogRequest{Dir: dir}, func([]byte) error { return nil })
	if err != nil || l != nil {
		t.Fatalf("opened without create over a directory of generations only: %v, %v", l, err)
	}
	if has, err := wal.HasLog(nil, dir); err != nil || has {
		t.Fatalf("a log was made there: %v, %v", has, err)
	}
	made, _, err := LocalLogs{}.Open(LogRequest{Dir: dir, Create: true}, func([]byte) error { return nil })
	if err != nil || made == nil {
		t.Fatalf("create: %v, %v", made, err)
	}
	if _, err := made.Append(wal.Record{Payload: []byte("state")}); err != nil {
		t.Fatal(err)
	}
	made.Close()
	again, records, err := LocalLogs{}.Open(LogRequest{Dir: dir}, func([]byte) error { return nil })
	if err != nil || again == nil || records != 1 {
		t.Fatalf("the log made before: %v, %d records, %v", again, records, err)
	}
	again.Close()
}
