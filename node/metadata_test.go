package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// putRecord writes a raw value under a key of the node's metadata bucket,
// as anyone with access to the KV could (`nats kv put braid-meta ...`).
func putRecord(t *testing.T, nc *nats.Conn, key, value string) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), meta.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), key, []byte(value)); err != nil {
		t.Fatal(err)
	}
}

// TestBadTopicRecordQuarantinesTheTopic writes an invalid topic record into
// the store: the next start serves every other topic, answers requests for
// that one TOPIC_QUARANTINED with the reason, counts it, and lets it be
// deleted.
func TestBadTopicRecordQuarantinesTheTopic(t *testing.T) {
	dir := t.TempDir()
	n, nc := startNode(t, dir)
	const good = "topic://public/default/good"
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: good, Segments: 2}, nil)
	produce(t, nc, "good", "k", []byte("kept"))
	putRecord(t, nc, "topic.public.default.0.victim", `{"topic":"topic://public/default/victim","layout":{"epoch":1}}`)
	stopNode(t, n, nc)

	n, nc = startNode(t, dir)
	defer stopNode(t, n, nc)
	if got := produce(t, nc, "good", "k", []byte("again")); got.Offset != 1 {
		t.Fatalf("the good topic after the restart: %+v", got)
	}
	e := admin(t, nc, api.AdminTopicDescribe, api.TopicRequest{Topic: "topic://public/default/victim"}, nil)
	if e == nil || e.Code != api.CodeTopicQuarantined || !strings.Contains(e.Message, "layout") {
		t.Fatalf("describe of the bad topic: %v, want TOPIC_QUARANTINED with the reason", e)
	}
	_, _, e = request(t, nc, api.TopicSubject(api.ProducePrefix, "public", "default", "victim"), []byte("x"), nil)
	if e == nil || e.Code != api.CodeTopicQuarantined {
		t.Fatalf("produce to the bad topic: %v, want TOPIC_QUARANTINED", e)
	}
	var list api.TopicListReply
	mustAdmin(t, nc, api.AdminTopicList, api.TopicListRequest{Namespace: "public/default"}, &list)
	if len(list.Topics) != 2 {
		t.Fatalf("topic.list %v, want the good topic and the quarantined one", list.Topics)
	}
	if m := scrape(t, n); !contains(m, "braid_topics_quarantined 1") {
		t.Fatalf("metrics:\n%s", grep(m, "quarantined"))
	}
	mustAdmin(t, nc, api.AdminTopicDelete, api.TopicRequest{Topic: "topic://public/default/victim"}, nil)
	if e := admin(t, nc, api.AdminTopicDescribe, api.TopicRequest{Topic: "topic://public/default/victim"}, nil); e == nil || e.Code != api.CodeTopicNotFound {
		t.Fatalf("describe after the delete: %v, want TOPIC_NOT_FOUND", e)
	}
	if m := scrape(t, n); !contains(m, "braid_topics_quarantined 0") {
		t.Fatalf("metrics after the delete:\n%s", grep(m, "quarantined"))
	}
}

// TestLostMetadataRefusesToStart removes the metadata store while topic
// logs remain: the node refuses to start, naming the logs, instead of
// starting empty and letting the topic be created again over them.
func TestLostMetadataRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	n, nc := startNode(t, dir)
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: "topic://public/default/kept"}, nil)
	produce(t, nc, "kept", "k", []byte("data"))
	stopNode(t, n, nc)
	if err := os.RemoveAll(filepath.Join(dir, "nats")); err != nil {
		t.Fatal(err)
	}
	n2, err := Start(context.Background(), Config{DataDir: dir, NATSListen: "127.0.0.1:-1", MetricsListen: "off",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil {
		n2.Close()
		t.Fatal("started without the records of the topics on disk")
	}
	if !errors.Is(err, actors.ErrOrphanLogs) || !strings.Contains(err.Error(), filepath.Join("public", "default", "kept")) {
		t.Fatalf("start error %v, want ErrOrphanLogs naming public/default/kept", err)
	}
}

// TestRecreatedTopicDoesNotAdoptOldFiles leaves the files of a deleted
// topic where they were (as a delete cut short would) and creates the
// topic again: it starts empty, at offset 0, and a restart finishes
// nothing it should not.
func TestRecreatedTopicDoesNotAdoptOldFiles(t *testing.T) {
	dir := t.TempDir()
	n, nc := startNode(t, dir)
	const uri = "topic://public/default/again"
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: uri, Segments: 1}, nil)
	for range 20 {
		produce(t, nc, "again", "k", []byte("old"))
	}
	nameDir := filepath.Join(dir, "topics", "public", "default", "again")
	saved := t.TempDir()
	if err := os.CopyFS(saved, os.DirFS(nameDir)); err != nil {
		t.Fatal(err)
	}
	mustAdmin(t, nc, api.AdminTopicDelete, api.TopicRequest{Topic: uri}, nil)
	if err := os.CopyFS(nameDir, os.DirFS(saved)); err != nil { // the old files are back
		t.Fatal(err)
	}
	_ = os.Remove(filepath.Join(nameDir, "DELETING"))
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: uri, Segments: 1}, nil)
	if got := produce(t, nc, "again", "k", []byte("new")); got.Offset != 0 {
		t.Fatalf("the topic created again appended at offset %d: it adopted the old topic's log", got.Offset)
	}
	msgs := fetchAll(t, nc, "again", "audit", "c1")
	if len(msgs) != 1 || string(msgs[0].Payload) != "new" {
		t.Fatalf("the topic created again serves %d messages, want only its own", len(msgs))
	}
	stopNode(t, n, nc)
	n, nc = startNode(t, dir)
	defer stopNode(t, n, nc)
	if msgs := fetchAll(t, nc, "again", "audit2", "c1"); len(msgs) != 1 {
		t.Fatalf("after a restart the topic serves %d messages, want 1", len(msgs))
	}
}

// TestDeleteCutShortIsFinishedAtStart: a topic directory without a record
// that carries the delete marker is what a delete cut short by a crash
// leaves; the next start removes it rather than refusing to start.
func TestDeleteCutShortIsFinishedAtStart(t *testing.T) {
	dir := t.TempDir()
	left := filepath.Join(dir, "topics", "public", "default", "gone", "abc", "seg-0", "b-0")
	if err := os.MkdirAll(left, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "topics", "public", "default", "gone", "DELETING"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	n, nc := startNode(t, dir)
	defer stopNode(t, n, nc)
	if _, err := os.Stat(filepath.Join(dir, "topics", "public", "default", "gone")); !os.IsNotExist(err) {
		t.Fatalf("the rest of the cut-short delete is still there: %v", err)
	}
}
