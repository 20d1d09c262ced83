package client

// unitPos is a StreamConsumer's positions in one unit (segment, entry
// bucket), guarded by the consumer's mu. Messages point at theirs, so that
// Next and Ack touch no map.
type unitPos struct {
	unit unit
	// delivered is one past the highest offset returned by Next (valid once
	// hasDelivered is set).
	delivered    uint64
	hasDelivered bool
	// acked is one past the highest offset the application acked; toAck
	// the same, for acks not sent yet (pending says it is in the
	// consumer's pending list); ackSent for acks the server has taken (they
	// are durable). Invariant: toAck <= acked.
	acked, toAck, ackSent uint64
	pending               bool
	// received is one past the highest offset the server handed to this
	// consumer since it last joined. The server refuses an ack beyond what
	// it delivered, and after a re-join it delivers again from its durable
	// ack cursor, so acks are held back to received.
	received uint64
}

// unitPositions holds a consumer's unitPos by unit, and the list of those
// with acks to send.
type unitPositions struct {
	byUnit  map[unit]*unitPos
	pending []*unitPos
	last    *unitPos // the unit looked up last: messages come in runs per unit
}

func newUnitPositions() unitPositions {
	return unitPositions{byUnit: make(map[unit]*unitPos)}
}

// get returns u's positions, creating them.
func (ps *unitPositions) get(u unit) *unitPos {
	if ps.last != nil && ps.last.unit == u {
		return ps.last
	}
	p := ps.byUnit[u]
	if p == nil {
		p = &unitPos{unit: u}
		ps.byUnit[u] = p
	}
	ps.last = p
	return p
}

// setToAck raises p's pending ack to next and lists p as pending.
func (ps *unitPositions) setToAck(p *unitPos, next uint64) {
	p.toAck = max(p.toAck, next)
	if !p.pending {
		p.pending = true
		ps.pending = append(ps.pending, p)
	}
}

// clearReceived forgets what the server handed out (after a re-join).
func (ps *unitPositions) clearReceived() {
	for _, p := range ps.byUnit {
		p.received = 0
	}
}
