package node

// startClients starts the services that take the clients' requests: the
// node took the entry role (cluster.Config.Clients). started is false
// when the node closes.
func (n *Node) startClients() (started bool, err error) {
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

// stopClients stops taking the clients' requests (the cluster service,
// the forwarded requests and what other nodes ask stay): the node lost
// the entry role, and may take it again once it is free.
func (n *Node) stopClients() {
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
