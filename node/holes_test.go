package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/braidmq/braid/api"
)

// damageRecord flips a byte of the one bucket log record under dir whose
// payload holds marker, as a bad sector would.
func damageRecord(t *testing.T, dir, marker string) {
	t.Helper()
	found := false
	err := filepath.WalkDir(filepath.Join(dir, "topics", "public"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || found {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if i := bytes.Index(data, []byte(marker)); i >= 0 {
			data[i] ^= 0x20
			found = true
			return os.WriteFile(path, data, 0o640)
		}
		return nil
	})
	if err != nil || !found {
		t.Fatalf("damaging %q under %s: found %v, %v", marker, dir, found, err)
	}
}

// TestLostRecordsAreReportedAndSkipped damages one acknowledged record in
// the middle of a bucket log: after a restart every other record is served,
// the node logs the hole at error level and counts it, read.fetch reports
// OFFSETS_LOST with the lost range and a text (binary and JSON), and a
// subscription reads past it.
func TestLostRecordsAreReportedAndSkipped(t *testing.T) {
	dir := t.TempDir()
	n, nc := startNode(t, dir)
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: "topic://public/default/damaged", Segments: 1, Buckets: 1}, nil)
	for i := range 20 {
		payload := fmt.Sprintf("m%02d", i)
		if i == 7 {
			payload = "VICTIM"
		}
		produce(t, nc, "damaged", "k", []byte(payload))
	}
	stopNode(t, n, nc)
	damageRecord(t, dir, "VICTIM")

	logs := &lockedBuffer{}
	n, nc = startNodeWith(t, dir, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	defer stopNode(t, n, nc)
	subject := api.ReadSubject(api.ReadFetch, "public", "default", "damaged")
	read := func(from uint64, format string) []byte {
		body, _ := json.Marshal(api.ReadRequest{Units: []api.ReadUnit{{Segment: 0, Bucket: 0, Offset: from}}, Max: 100, Format: format})
		data, _, e := request(t, nc, subject, body, nil)
		if e != nil {
			t.Fatalf("read.fetch from %d: %v", from, e)
		}
		return data
	}
	decode := func(data []byte) api.ReadReply {
		r, err := api.DecodeReadReply(data)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	// A read stops before the hole; one from it reports it.
	if r := decode(read(0, "")); len(r.Messages) != 7 || r.Units[0].Code != 0 {
		t.Fatalf("read from 0: %d messages, unit %+v; want the 7 before the hole", len(r.Messages), r.Units[0])
	}
	r := decode(read(7, ""))
	u := r.Units[0]
	if u.Code != api.CodeOffsetsLost.Number || u.LostFrom != 7 || u.LostTo != 8 || !strings.Contains(u.Message, "[7, 8)") || len(r.Messages) != 0 {
		t.Fatalf("read from the hole: unit %+v, %d messages", u, len(r.Messages))
	}
	if r := decode(read(8, "")); len(r.Messages) != 12 || string(r.Messages[0].Payload) != "m08" {
		t.Fatalf("read after the hole: %d messages", len(r.Messages))
	}
	var j api.ReadReplyJSON
	if err := json.Unmarshal(read(7, "json"), &j); err != nil {
		t.Fatal(err)
	}
	if ju := j.Units[0]; ju.Code != api.CodeOffsetsLost.Number || ju.LostFrom != 7 || ju.LostTo != 8 || !strings.HasPrefix(ju.Error, "OFFSETS_LOST: offsets [7, 8)") {
		t.Fatalf("JSON read from the hole: %+v", ju)
	}

	// The hole is logged with where it is, and counted.
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "records lost to damage") {
		t.Fatalf("no error logged for the hole:\n%s", logs.String())
	}
	metrics := scrape(t, n)
	if !contains(metrics, "braid_wal_holes_total 1") || !contains(metrics, "braid_wal_lost_records_total 1") {
		t.Fatalf("hole metrics:\n%s", grep(metrics, "braid_wal_"))
	}

	// A subscription reads everything else.
	msgs := fetchAll(t, nc, "damaged", "sub", "c1")
	if len(msgs) != 19 {
		t.Fatalf("subscription read %d messages, want the 19 not lost", len(msgs))
	}
}
