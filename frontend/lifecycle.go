package frontend

import "time"

// StartClients starts the services that take the clients' requests: the
// node took the entry role (cluster.Config.Clients). started is false
// when the front-end closes.
func (n *Frontend) StartClients() (started bool, err error) {
	n.svcMu.Lock()
	defer n.svcMu.Unlock()
	if n.closing {
		return false, nil
	}
	if err := n.addServices(); err != nil {
		return false, err
	}
	return true, nil
}

// StopClients stops taking the clients' requests (the cluster service,
// the forwarded requests and what other nodes ask stay): the node lost
// the entry role, and may take it again once it is free.
func (n *Frontend) StopClients() {
	n.svcMu.Lock()
	defer n.svcMu.Unlock()
	if n.fast != nil {
		n.fast.pause()
	}
	for _, s := range n.services {
		_ = s.Stop()
	}
	n.services = nil
}

// Start begins serving what other nodes forward here; the clients'
// services start with the entry role (StartClients), what every node
// answers with AddClusterService.
func (n *Frontend) Start() error {
	n.produceM = newProduceMetrics(n.registry)
	return n.startForwarding()
}

// HoldReplies holds the produce front-end's replies while the node's
// committer acknowledges a round of appends, so that they go out in one
// write; it returns the release (actors.Config.HoldReplies).
func (n *Frontend) HoldReplies() func() {
	f := n.replies.Load()
	if f == nil {
		return func() {}
	}
	f.mu.Lock()
	conn := f.conn
	f.mu.Unlock()
	if conn == nil {
		return func() {}
	}
	conn.Hold()
	return conn.Release
}

// StopTaking stops taking requests: the produce front-end and every
// service stop (once; a node whose lease another run took stops so too).
func (n *Frontend) StopTaking() {
	n.stopOnce.Do(func() {
		if n.fast != nil {
			n.fast.stopTaking()
		}
		for _, s := range n.services {
			_ = s.Stop()
		}
		if n.clusterSvc != nil {
			_ = n.clusterSvc.Stop()
		}
	})
}

// Drain begins the front-end's close: it takes no request from now on,
// answers every produce request it took (with its result, or UNAVAILABLE
// from the stopping topics) for up to timeout, and stops forwarding and
// parked reads; it returns the produce requests left unanswered. The
// topics close after it, then Close.
func (n *Frontend) Drain(timeout time.Duration) (unanswered int) {
	n.svcMu.Lock()
	n.closing = true
	n.svcMu.Unlock()
	n.StopTaking()
	left := n.produceInflight.wait(timeout)
	n.fwd.close()
	n.services = nil
	n.reads.stop()
	return left
}

// Close closes the produce connection, after the topics answered what
// they took.
func (n *Frontend) Close() {
	if n.fast != nil {
		n.replies.Store(nil)
		n.fast.close()
		n.fast = nil
	}
}
