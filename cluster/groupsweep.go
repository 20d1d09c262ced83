package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/routing"
)

// A node may keep replicas of consumer groups' state that count no more:
// a deleted subscription's (on the nodes other than its home, which
// removes its own), or a generation the group left for one on other
// nodes (a follower drops the older ones only when it opens a newer one).
// Every groupSweepEvery the node looks at the record of every group state
// replica it runs and stops and removes those of a subscription that is
// gone, or of a generation that is neither the record's nor the one being
// made. A record that cannot be read keeps the replica.

// groupSweepEvery is how often a node sweeps its consumer groups' state
// replicas (from its lease renewals).
const groupSweepEvery = 30 * time.Second

// maybeSweepGroupReplicas starts a sweep when the last one is
// groupSweepEvery old and none runs.
func (n *Member) maybeSweepGroupReplicas(now time.Time) {
	if n.meta == nil || n.replicas == nil {
		return
	}
	last := n.groupSweep.last.Load()
	if last != 0 && now.Sub(time.Unix(0, last)) < groupSweepEvery || !n.groupSweep.running.CompareAndSwap(false, true) {
		return
	}
	n.groupSweep.last.Store(now.UnixNano())
	go func() {
		defer n.groupSweep.running.Store(false)
		n.sweepGroupReplicas()
	}()
}

// sweepGroupReplicas stops and removes the state replicas that count no
// more (see above) and returns how many.
func (n *Member) sweepGroupReplicas() int {
	set := &n.groupReplicas
	set.mu.Lock()
	open := make(map[string]string, len(set.open))
	for name, r := range set.open {
		open[name] = r.dir
	}
	set.mu.Unlock()
	swept := 0
	for name, dir := range open {
		kind, topic, sub, gen, err := parseGroupRaftName(name)
		if err != nil {
			continue
		}
		tn, err := routing.ParseTopic(topic)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), remoteReadTimeout)
		rec, _, err := n.meta.GroupHome(ctx, tn, kind, sub)
		cancel()
		why := "its subscription is deleted"
		switch {
		case errors.Is(err, meta.ErrNotFound):
		case err != nil:
			continue // cannot tell: kept
		case rec.Generation == gen || rec.Next != nil && rec.Next.Generation == gen:
			continue
		default:
			why = "a generation its group left"
		}
		n.stopGroupReplica(name)
		if err := os.RemoveAll(dir); err != nil {
			n.log.Error("removing a consumer group's state replica that counts no more failed", "group", name, "dir", dir, "err", err)
			continue
		}
		_ = os.Remove(filepath.Dir(dir)) // the group's directory, when it holds nothing else
		n.log.Info("a consumer group's state replica removed: "+why, "topic", topic, "subscription", sub, "kind", kind, "generation", gen)
		swept++
	}
	return swept
}
