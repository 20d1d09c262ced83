package consumers

import (
	"cmp"
	"maps"
	"slices"
)

// onStats answers a GetStats. Backlog asks Source.Bounds for every unit of
// every segment not drained, so it costs more than a fetch.
func (g *group) onStats(m *GetStats) {
	g.refresh()
	st := Stats{
		Topic:         g.cfg.Source.Topic(),
		Subscription:  g.cfg.Subscription,
		Created:       g.state.Created,
		Start:         g.state.Start.String(),
		ReadCompacted: g.state.Start.compacted(),
		Epoch:         g.layout.Epoch,
	}
	if !g.state.Created {
		st.Epoch = g.cfg.Source.Layout().Epoch
		if m.Reply != nil {
			m.Reply(st, nil)
		}
		return
	}
	for _, c := range g.consumers {
		assigned := g.assignedTo(c.name)
		st.Consumers = append(st.Consumers, ConsumerStats{
			Name: c.name, Assigned: assigned, Idle: assigned == 0,
			SessionTimeout: c.timeout, LastSeen: c.lastSeen, Parked: c.parked != nil,
		})
	}
	slices.SortFunc(st.Consumers, func(a, b ConsumerStats) int { return cmp.Compare(a.Name, b.Name) })
	st.Drained = slices.Sorted(maps.Keys(g.state.Drained))
	st.Readable = slices.SortedFunc(maps.Keys(g.units), compareUnits)
	st.Withheld = withheldUnits(g.layout, g.state.isDrained)
	st.AwaitedOwners = g.awaitedNames()
	for u, us := range g.units {
		if us.owner != g.targets[u] && us.owner != "" {
			st.PendingHandoffs++
		}
	}
	for _, u := range g.unitInfos() {
		st.Backlog += u.Lag
	}
	if m.Reply != nil {
		m.Reply(st, nil)
	}
}
