package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
)

// splitTopic creates topic uri of one segment through nodes until its home
// is the entry node, then splits it until it has segments active ones:
// the home keeps the one covering hash 0, placement puts the others on
// the other nodes. It returns the topic and its layout.
func splitTopic(nodes []*node, prefix string, segments int) api.TopicDescription {
	ent := entryIndex(nodes)
	var d api.TopicDescription
	for i := 0; ; i++ {
		d = createTopic(nodes[ent].nc, fmt.Sprintf("%s%d", prefix, i))
		if nodeIndex(nodes, d) == ent {
			break
		}
		if i == 100 {
			check(fmt.Errorf("no topic placed on the entry node in 100 creates"))
		}
	}
	return splitTo(nodes[ent].nc, d, segments)
}

// splitTo splits the widest active segment of d until it has segments
// active ones.
func splitTo(nc *nats.Conn, d api.TopicDescription, segments int) api.TopicDescription {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		var active []api.SegmentInfo
		for _, s := range d.Segments {
			if s.State == string(topology.StateActive) {
				active = append(active, s)
			}
		}
		if len(active) >= segments {
			return d
		}
		widest, width := active[0], uint64(0)
		for _, s := range active {
			lo, _ := topology.ParseHash(s.Range[0])
			hi, _ := topology.ParseHash(s.Range[1])
			if hi-lo >= width {
				widest, width = s, hi-lo
			}
		}
		var err error
		d, err = client.NewAdmin(nc).Split(ctx, d.Topic, widest.ID, nil)
		check(err)
	}
}

// owners counts the active segments of d by owner.
func owners(d api.TopicDescription) map[string]int {
	out := map[string]int{}
	for _, s := range d.Segments {
		if s.State == string(topology.StateActive) {
			out[s.Owner]++
		}
	}
	return out
}

// childLoss kills, kills times, the node holding a split's child (not the
// entry node, which is the topic's home), measuring how long after the
// SIGKILL a write of a key in the child's range, through the third node,
// is acknowledged again (the home relocates the range once the node's
// lease lapsed), then restarts it. Each produce request waits 500 ms.
func childLoss(nodes []*node, kills int) {
	var took []time.Duration
	var child0 api.TopicDescription
	for k := 1; k <= kills; k++ {
		// Split until a segment is on another node than the home (the
		// least loaded node takes a new segment: the home too, when the
		// others are busier).
		home := entryIndex(nodes)
		var child api.SegmentInfo
		victim := -1
		for segs := 2; victim < 0; segs++ {
			if segs > 16 {
				check(fmt.Errorf("no segment placed off the home in 16 splits"))
			}
			var d api.TopicDescription
			if segs == 2 {
				d = splitTopic(nodes, fmt.Sprintf("topic://public/default/childloss%d-", k), segs)
				home = nodeIndex(nodes, d)
			} else {
				d = splitTo(nodes[home].nc, child0, segs)
			}
			child0 = d
			for _, s := range d.Segments {
				for i, nd := range nodes {
					if s.State == string(topology.StateActive) && nd.id == s.Owner && i != home {
						child, victim = s, i
					}
				}
			}
		}
		d := child0
		via := 3 - home - victim
		lo, _ := topology.ParseHash(child.Range[0])
		hi, _ := topology.ParseHash(child.Range[1])
		key := ""
		for i := 0; key == ""; i++ {
			if h := routing.KeyHashString("k" + strconv.Itoa(i)); lo <= h && h <= hi {
				key = "k" + strconv.Itoa(i)
			}
		}
		p := strings.Split(strings.TrimPrefix(d.Topic, "topic://"), "/")
		m := &nats.Msg{Subject: api.TopicSubject(api.ProducePrefix, p[0], p[1], p[2]), Header: nats.Header{api.HeaderKey: []string{key}}, Data: []byte("x")}
		reply, err := nodes[via].nc.RequestMsg(m, 5*time.Second)
		check(err)
		if reply.Header.Get(micro.ErrorCodeHeader) != "" {
			check(fmt.Errorf("produce before the kill: %s", reply.Header.Get(micro.ErrorHeader)))
		}
		t0 := time.Now()
		_ = nodes[victim].cmd.Process.Kill()
		_ = nodes[victim].cmd.Wait()
		waitAcked(nodes[via].nc, m, t0, fmt.Sprintf("kill %d of the child's node", k))
		took = append(took, time.Since(t0))
		fmt.Printf("kill %d of the node holding a split's child (%s; home %s): a write of its range acknowledged again after %s\n", k,
			nodes[victim].id, nodes[home].id, took[len(took)-1].Round(time.Millisecond))
		restart(nodes, victim)
	}
	slices.Sort(took)
	fmt.Printf("loss of the node holding a split's child over %d kills: p50 %s, p99 (max) %s\n", len(took),
		took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
}
