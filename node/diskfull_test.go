package node

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/wal"
	"github.com/braidmq/braid/wal/crashfs"
)

// TestAppendsRecoverFromAFullDisk fills the disk under the bucket logs (an
// injected ENOSPC): appends are answered UNAVAILABLE naming the cause, the
// failure is logged at error level and counted, reads and a subscription
// go on serving what was stored, and once space is freed appends work
// again within seconds, with no restart; nothing answered as failed is
// served, nothing acknowledged is missing.
func TestAppendsRecoverFromAFullDisk(t *testing.T) {
	for _, durability := range []string{"always", "none"} {
		t.Run(durability, func(t *testing.T) { testFullDisk(t, durability) })
	}
}

func testFullDisk(t *testing.T, durability string) {
	disk := crashfs.NewFull(wal.OSFS)
	logs := &lockedBuffer{}
	n, nc := startNodeWith(t, t.TempDir(), func(c *Config) {
		c.LogFS = disk
		c.Durability = durability
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	defer stopNode(t, n, nc)
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: "topic://public/default/full", Segments: 1, Buckets: 1}, nil)
	subject := api.TopicSubject(api.ProducePrefix, "public", "default", "full")
	send := func(payload string) *api.Error {
		_, _, e := request(t, nc, subject, []byte(payload), nats.Header{api.HeaderKey: []string{"k"}})
		return e
	}
	var acked []string
	for i := range 10 {
		p := fmt.Sprintf("before-%d", i)
		if e := send(p); e != nil {
			t.Fatalf("produce before the disk fills: %v", e)
		}
		acked = append(acked, p)
	}

	disk.SetFull(true)
	for i := range 5 {
		e := send(fmt.Sprintf("refused-%d", i))
		if e == nil || e.Code != api.CodeUnavailable || !strings.Contains(e.Message, "no space left on device") {
			t.Fatalf("produce on a full disk: %v; want UNAVAILABLE naming the cause", e)
		}
	}
	if disk.Refused() == 0 {
		t.Fatal("the full disk refused no write: the logs do not go through the FS")
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "no space left on device") {
		t.Fatalf("the failed write was not logged at error level:\n%s", logs.String())
	}
	if m := scrape(t, n); !contains(m, `braid_wal_write_failures_total{reason="no_space"} 1`) {
		t.Fatalf("write failure metrics:\n%s", grep(m, "braid_wal_"))
	}
	// Reads and subscriptions go on while the disk is full.
	if got := readPayloads(t, nc, "full"); strings.Join(got, ",") != strings.Join(acked, ",") {
		t.Fatalf("read on a full disk: %v, want %v", got, acked)
	}
	if msgs := fetchAll(t, nc, "full", "sub", "c1"); len(msgs) != len(acked) {
		t.Fatalf("subscription on a full disk read %d messages, want %d", len(msgs), len(acked))
	}

	// Space is freed: appends work again within seconds.
	disk.SetFull(false)
	resume := func(what string) {
		t.Helper()
		freed := time.Now()
		var e *api.Error
		if !poll.Until(10*time.Second, func() bool {
			p := fmt.Sprintf("after-%d", len(acked))
			if e = send(p); e == nil {
				acked = append(acked, p)
				return true
			}
			if e.Code != api.CodeUnavailable {
				t.Fatalf("produce after %s (%s): %v", what, time.Since(freed).Round(time.Millisecond), e)
			}
			return false
		}) {
			t.Fatalf("produce after %s (%s): %v", what, time.Since(freed).Round(time.Millisecond), e)
		}
		t.Logf("appends resumed %s after %s", time.Since(freed).Round(time.Millisecond), what)
	}
	resume("space was freed")
	for i := range 5 {
		p := fmt.Sprintf("after-more-%d", i)
		if e := send(p); e != nil {
			t.Fatalf("produce after recovery: %v", e)
		}
		acked = append(acked, p)
	}
	reopens := 1
	if durability == "always" {
		// An fsync that fails after its write went through: the record
		// reached the file but was answered UNAVAILABLE, so the reopened
		// log must not serve it.
		disk.SetSyncFails(true)
		if e := send("unsynced"); e == nil || e.Code != api.CodeUnavailable || !strings.Contains(e.Message, "I/O error") {
			t.Fatalf("produce whose fsync fails: %v; want UNAVAILABLE naming the cause", e)
		}
		disk.SetSyncFails(false)
		resume("the fsync failure")
		reopens++
	}
	if got := readPayloads(t, nc, "full"); strings.Join(got, ",") != strings.Join(acked, ",") {
		t.Fatalf("after recovery the log holds %v, want exactly the acknowledged %v", got, acked)
	}
	if m := scrape(t, n); !contains(m, fmt.Sprintf(`braid_wal_reopens_total{result="ok"} %d`, reopens)) {
		t.Fatalf("reopen metrics:\n%s", grep(m, "braid_wal_"))
	}
	if msgs := fetchAll(t, nc, "full", "sub", "c1"); len(msgs) != len(acked)-10 {
		t.Fatalf("subscription after recovery read %d new messages, want %d", len(msgs), len(acked)-10)
	}
}

// readPayloads reads the payloads of bucket 0 of segment 0 of topic.
func readPayloads(t *testing.T, nc *nats.Conn, topic string) []string {
	t.Helper()
	body, _ := json.Marshal(api.ReadRequest{Units: []api.ReadUnit{{Segment: 0, Bucket: 0, Offset: 0}}, Max: 1000})
	data, _, e := request(t, nc, api.ReadSubject(api.ReadFetch, "public", "default", topic), body, nil)
	if e != nil {
		t.Fatalf("read.fetch: %v", e)
	}
	r, err := api.DecodeReadReply(data)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range r.Messages {
		out = append(out, string(m.Payload))
	}
	return out
}
