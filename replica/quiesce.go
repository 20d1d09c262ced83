package replica

import (
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"
)

// Quiescence: an idle group stops ticking on every replica. Its leader,
// idle for QuiesceAfter ticks with every follower holding what it
// committed, goes quiet and tells them (Quiet); a follower that holds the
// same goes quiet too. A message that gives raft work wakes a group
// (post, Step), and so does the loss of a peer's node (Host.PeerDown).

// tick gives the group a tick unless it is quiet.
func (g *Group) tick() {
	g.mu.Lock()
	quiet := g.quiesced
	g.idleTicks++
	g.mu.Unlock()
	if quiet || g.awaitsLeader.Load() {
		return
	}
	g.host.counters.Ticks.Add(1)
	g.post(false, func() {
		g.rn.Tick()
		g.checkQuiet = true
	})
}

// wake makes a quiet group tick again.
func (g *Group) wake() { g.post(true, func() {}) }

// forgetLeaderOn wakes the group and, if its leader is the replica on
// node (taken for down), forgets that leader, so that the group can elect
// another without waiting out the leader's lease (Host.PeerDown).
func (g *Group) forgetLeaderOn(node string) {
	g.post(true, func() {
		lead := g.rn.BasicStatus().Lead
		if p, ok := g.cfg.Peers[lead]; ok && lead != g.cfg.ID && p.Node == node {
			_ = g.rn.ForgetLeader()
		}
	})
}

// quiet takes a leader's notice that the group is idle: a follower that
// holds everything the leader committed, at the leader's term, stops
// ticking until a message comes. It is checked once the messages taken
// with it are handled (the leader's last heartbeat comes in the same
// round).
func (g *Group) quiet(q Quiet) {
	g.post(false, func() { g.notice = &q })
}

// takeNotice quiets the follower if the leader's notice still holds.
func (g *Group) takeNotice(q Quiet) {
	st := g.rn.BasicStatus()
	if st.Lead != q.From || st.GetTerm() != q.Term || st.GetCommit() != q.Commit || g.hasWork() {
		return
	}
	g.setQuiesced()
}

func (g *Group) setQuiesced() {
	g.mu.Lock()
	if len(g.inbox) == 0 {
		g.quiesced = true
		g.host.counters.Quiesced.Add(1)
	}
	g.mu.Unlock()
}

// hasWork says whether the group waits on something: a proposal not
// answered, or a Ready not handled.
func (g *Group) hasWork() bool {
	return len(g.unindexed) > 0 || len(g.byIndex) > 0 || g.rn.HasReady()
}

// maybeQuiesce quiets an idle leader whose followers hold everything it
// committed, and tells them.
func (g *Group) maybeQuiesce() {
	g.mu.Lock()
	idle := g.idleTicks
	g.mu.Unlock()
	after := g.host.cfg.QuiesceAfter
	if after < 0 || idle < after || g.hasWork() {
		return
	}
	// BasicStatus and WithProgress: Status copies the progress map (it
	// was a few per cent of a node's CPU with thousands of groups awake).
	st := g.rn.BasicStatus()
	if st.RaftState != raft.StateLeader || st.LeadTransferee != 0 {
		return
	}
	commit := st.GetCommit()
	caughtUp := true
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if pr.Match != commit || id != g.cfg.ID && !pr.RecentActive {
			caughtUp = false
		}
	})
	if !caughtUp {
		return
	}
	g.setQuiesced()
	for id, p := range g.cfg.Peers {
		if id != g.cfg.ID {
			g.host.send(p, Envelope{Group: g.cfg.Group, Quiesce: &Quiet{From: g.cfg.ID, Term: st.GetTerm(), Commit: commit}})
		}
	}
}
