package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// TestSecondRunOfANodeIDIsRefused starts a node, then a second one with
// the same id through the first one's NATS server (as a node with an
// external NATS): the second is refused, once the first's lease has held
// for twice its time, and the first still serves; a third with another
// id joins as a standby.
func TestSecondRunOfANodeIDIsRefused(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	first, err := Start(context.Background(), Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1", MetricsListen: "off",
		Logger: quiet, NodeID: "a1", LeaseTTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Close() })
	if !first.Serving() {
		t.Fatal("the first node of a cluster does not serve the topics")
	}
	_, err = Start(context.Background(), Config{DataDir: t.TempDir(), NATSURL: first.ClientURL(), MetricsListen: "off",
		Logger: quiet, NodeID: "a1", LeaseTTL: 600 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "in use by another running braid serve") {
		t.Fatalf("a second run of a live node id: %v, want a refusal", err)
	}
	standby, err := Start(context.Background(), Config{DataDir: t.TempDir(), NATSURL: first.ClientURL(), MetricsListen: "off",
		Logger: quiet, NodeID: "a2", LeaseTTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Close()
	if standby.Serving() {
		t.Fatal("a second node serves the topics beside the first")
	}
	nodes, err := first.meta.Nodes(context.Background())
	if err != nil || len(nodes) != 2 {
		t.Fatalf("nodes = %+v, %v; want a1 and a2", nodes, err)
	}
	for _, n := range nodes {
		if !n.Live(time.Now()) {
			t.Fatalf("node %s is not live: %+v", n.ID, n)
		}
	}
}

// TestSegmentsRecordTheirOwner: the segments a node creates (a topic's
// first ones, a split's children) record it as their owner in the layout,
// and describe shows it.
func TestSegmentsRecordTheirOwner(t *testing.T) {
	node, err := Start(context.Background(), Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1", MetricsListen: "off",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), NodeID: "o1"})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	nc, err := nats.Connect(node.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const uri = "topic://public/default/owned"
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: uri, Segments: 2}, nil)
	mustAdmin(t, nc, api.AdminTopicSplit, api.SplitRequest{Topic: uri, Segment: new(uint64)}, nil)
	var d api.TopicDescription
	mustAdmin(t, nc, api.AdminTopicDescribe, api.TopicRequest{Topic: uri}, &d)
	if len(d.Segments) != 4 {
		t.Fatalf("%d segments after a split of one of two", len(d.Segments))
	}
	for _, s := range d.Segments {
		if s.Owner != "o1" {
			t.Fatalf("segment %d has owner %q, want o1", s.ID, s.Owner)
		}
	}
}

// TestANodeThatCannotRenewTakesNoAppends stops a node's lease renewals: once
// its lease is within the margin of lapsing, produce requests (one, batch
// and multi) are refused with UNAVAILABLE and counted; after a renewal they
// are taken again.
func TestANodeThatCannotRenewTakesNoAppends(t *testing.T) {
	node, nc := startNodeWith(t, t.TempDir(), func(c *Config) { c.LeaseTTL = 600 * time.Millisecond })
	const uri = "topic://public/default/fenced"
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: uri, Segments: 1}, nil)
	subject := api.TopicSubject(api.ProducePrefix, "public", "default", "fenced")
	produce := func() string {
		m, err := nc.Request(subject, []byte("x"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return m.Header.Get(micro.ErrorCodeHeader)
	}
	if code := produce(); code != "" {
		t.Fatalf("a produce with a current lease: %s", code)
	}
	m := node.member
	m.StopRenewing()
	poll.Eventually(t, 10*time.Second, "a node whose lease is lapsing still takes appends", func() bool {
		return produce() == strconv.Itoa(api.CodeUnavailable.Number)
	})
	if got := gathered(t, node, "braid_node_fenced_requests_total", ""); got < 1 {
		t.Fatalf("fenced requests counted: %v", got)
	}
	if !m.Renew() {
		t.Fatal("renewal failed")
	}
	m.TryEntry() // the entry role lapsed with the lease: renew it too
	// The node rejoins (stops its topics) before it takes appends again.
	var code string
	if !poll.Until(10*time.Second, func() bool { code = produce(); return code == "" }) {
		t.Fatalf("a produce after the renewal: %s", code)
	}
}

// TestARenewalThatLandedUnansweredIsNotALostLease: a renewal whose answer
// was lost still moved the lease's revision; the next renewal conflicts,
// finds the record its own run's, and goes on. A record of another run is
// a lost lease: the node stops taking requests.
func TestARenewalThatLandedUnansweredIsNotALostLease(t *testing.T) {
	node, _ := startNodeWith(t, t.TempDir(), func(c *Config) { c.LeaseTTL = 3 * time.Second })
	m := node.member
	m.StopRenewing()
	ctx := context.Background()
	rec, rev := m.Lease()
	rec.Renewed = time.Now().UnixMilli()
	if _, err := node.meta.RenewNodeLease(ctx, rec, rev); err != nil { // the lost answer
		t.Fatal(err)
	}
	if !m.Renew() {
		t.Fatal("a renewal after one that landed unanswered gave the lease up")
	}
	if err := m.Fence(); err != nil {
		t.Fatalf("fenced after adopting its own renewal: %v", err)
	}
	rec, rev = m.Lease()
	other := rec
	other.Started++ // another run of the id
	if _, err := node.meta.RenewNodeLease(ctx, other, rev); err != nil {
		t.Fatal(err)
	}
	if m.Renew() {
		t.Fatal("a renewal over another run's record went on")
	}
	if err := m.Fence(); err == nil {
		t.Fatal("a node whose lease another run took still takes appends")
	}
}

// TestLeasesCarryTheNodesLoad: a node's renewals record the active
// segments it owns and the bytes/s it made durable; node.list shows them.
func TestLeasesCarryTheNodesLoad(t *testing.T) {
	node, nc := startNodeWith(t, t.TempDir(), func(c *Config) { c.LeaseTTL = 600 * time.Millisecond; c.NodeID = "l1" })
	const uri = "topic://public/default/loaded"
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: uri, Segments: 2}, nil)
	subject := api.TopicSubject(api.ProducePrefix, "public", "default", "loaded")
	var (
		r    api.NodeListReply
		live float64
	)
	if !poll.Until(20*time.Second, func() bool {
		if _, err := nc.Request(subject, make([]byte, 1000), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		out, err := node.member.NodeList(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		r = out.(api.NodeListReply)
		if len(r.Nodes) != 1 || r.Nodes[0].ID != "l1" {
			t.Fatalf("node.list = %+v", r)
		}
		live = gathered(t, node, "braid_cluster_nodes", "live")
		return r.Nodes[0].Segments == 2 && r.Nodes[0].BytesPerSec > 0 && live == 1
	}) {
		t.Fatalf("the lease never showed the load: %+v, braid_cluster_nodes{state=live} %v", r.Nodes[0], live)
	}
}

// TestANodeTakesTheEntryRoleAgain: a node that gave the entry role up
// (another node took it while it was cut off) stops taking the clients'
// requests, and takes the role, and the requests, again once it is free.
func TestANodeTakesTheEntryRoleAgain(t *testing.T) {
	node, nc := startNodeWith(t, t.TempDir(), func(c *Config) { c.LeaseTTL = 600 * time.Millisecond })
	const uri = "topic://public/default/reentry"
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: uri, Segments: 1}, nil)
	subject := api.TopicSubject(api.ProducePrefix, "public", "default", "reentry")
	produce := func() error {
		m, err := nc.Request(subject, []byte("x"), 2*time.Second)
		if err != nil {
			return err
		}
		if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
			return fmt.Errorf("code %s: %s", code, m.Header.Get(micro.ErrorHeader))
		}
		return nil
	}
	if err := produce(); err != nil {
		t.Fatalf("as the entry node: %v", err)
	}
	node.member.LoseEntry()
	if err := produce(); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("after giving the role up: %v, want no responders", err)
	}
	// Its own record of the role lapses; a renewal takes it again.
	poll.Eventually(t, 10*time.Second, "the node did not take the entry role again", node.member.Entry)
	if err := produce(); err != nil {
		t.Fatalf("as the entry node again: %v", err)
	}
}

// gathered returns the value of metric name (of the series whose one
// label has value label, when given) in n's registry; 0 when absent.
func gathered(t *testing.T, n *Node, name, label string) float64 {
	t.Helper()
	families, err := n.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label != "" && (len(m.GetLabel()) != 1 || m.GetLabel()[0].GetValue() != label) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// TestAStartingNodeTakesNoNewTopics: a node holds its lease from before it
// recovers its topics until it serves; its lease says so (starting) until
// its first renewal, made as soon as it serves, and placement gives it
// nothing meanwhile (requests for a topic placed there would wait for it).
// Here a lease taken by hand stands for a node that is starting: none of
// the topics made goes to it, and node.list shows it starting and the
// node that serves not.
func TestAStartingNodeTakesNoNewTopics(t *testing.T) {
	node, err := Start(context.Background(), Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1", MetricsListen: "off",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), NodeID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	now := time.Now()
	if _, err := node.meta.TakeNodeLease(context.Background(), meta.NodeRecord{ID: "s2", Started: now.UnixMilli(), Renewed: now.UnixMilli(),
		Expires: now.Add(time.Hour).UnixMilli(), Starting: true}, 0); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(node.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var list api.NodeListReply
	poll.Eventually(t, 10*time.Second, "node.list: s1 no longer starting once it serves", func() bool {
		mustAdmin(t, nc, api.AdminNodeList, struct{}{}, &list)
		return len(list.Nodes) == 2 && !list.Nodes[0].Starting
	})
	if !list.Nodes[1].Starting || !list.Nodes[1].Live {
		t.Fatalf("node.list shows the starting node as %+v", list.Nodes[1])
	}
	for i := range 12 {
		var d api.TopicDescription
		mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: "topic://public/default/placed" + strconv.Itoa(i)}, &d)
		if owner := d.Segments[0].Owner; owner != "s1" {
			t.Fatalf("topic %d placed on %s, a node that does not serve yet", i, owner)
		}
	}
}

// TestANodeIsItsIDAndItsDataDirectorysIncarnation: node.list shows the
// incarnation its data directory holds; a restart on the same directory
// keeps it; the same node id on another (an empty) directory is another
// incarnation.
func TestANodeIsItsIDAndItsDataDirectorysIncarnation(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	incarnation := func(dir string) string {
		t.Helper()
		n, err := Start(context.Background(), Config{DataDir: dir, NATSListen: "127.0.0.1:-1", MetricsListen: "off", Logger: quiet, NodeID: "i1"})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		nc, err := nats.Connect(n.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		var list api.NodeListReply
		mustAdmin(t, nc, api.AdminNodeList, struct{}{}, &list)
		if len(list.Nodes) != 1 || list.Nodes[0].ID != "i1" {
			t.Fatalf("node.list = %+v", list.Nodes)
		}
		b, err := os.ReadFile(filepath.Join(dir, "incarnation"))
		if got := list.Nodes[0].Incarnation; err != nil || got == "" || got != strings.TrimSpace(string(b)) {
			t.Fatalf("node.list says incarnation %q, the directory holds %q (%v)", got, b, err)
		}
		return list.Nodes[0].Incarnation
	}
	first := incarnation(dir)
	if again := incarnation(dir); again != first {
		t.Fatalf("a restart on the same directory changed the incarnation: %s, then %s", first, again)
	}
	if other := incarnation(t.TempDir()); other == first {
		t.Fatalf("node i1 on an empty directory kept incarnation %s", first)
	}
}
