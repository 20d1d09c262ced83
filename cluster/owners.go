package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/placement"
	"github.com/braidmq/braid/routing"
	"github.com/nats-io/nats.go"
)

// Ownership: a topic is owned by one node (the owner its layout names),
// and only that node activates it; the others forward its requests there
// (package frontend). This file answers who owns a topic, remembering it
// for a while, and moves a topic whose owner is gone first (takeover.go).

// owns says whether this node owns a topic whose layout names owner: its
// own id, or none (a layout written before nodes had ids) on the node that
// serves such topics.
func (n *Member) Owns(owner string) bool {
	return owner == n.nodeID || (owner == "" && n.serving.Load())
}

// ownerNode resolves a layout's owner to a node id ("": the serving node).
func (n *Member) OwnerNode(owner string) string {
	if owner == "" {
		return n.servingNode
	}
	return owner
}

// placementViewAge is how old the view of the nodes' leases placement
// uses may be.
const placementViewAge = 250 * time.Millisecond

// placeTopic chooses the node a new topic's segments go to
// (placement.Choose over the live nodes' leases).
func (n *Member) PlaceTopic(uri string) string { return n.place(uri, "") }

// place is placeTopic for key, passing over node avoid among equals.
func (n *Member) place(key, avoid string) string {
	recs := n.members.liveNodes(placementViewAge)
	for _, r := range recs {
		if r.Starting {
			// A node starting in the view may serve by now: its first
			// renewal says so. Starts are rare; read the leases again.
			recs = n.members.liveNodes(0)
			break
		}
	}
	return placement.Choose(placementNodes(recs), key, avoid, n.nodeID, n.draining.Load())
}

// placementNodes is what placement knows of the nodes of recs.
func placementNodes(recs []meta.NodeRecord) []placement.Node {
	out := make([]placement.Node, len(recs))
	for i, r := range recs {
		out[i] = placement.Node{ID: r.ID, BytesPerSec: r.BytesPerSec, Segments: r.Segments, Draining: r.Draining || r.Starting}
	}
	return out
}

// ownerCacheTTL is how long a node remembers that another node owns a
// topic (so that requests it forwards do not each read the topic's
// record); owners change only when a topic is deleted and made again.
const ownerCacheTTL = 10 * time.Second

// ownerCacheMax bounds the remembered owners (the cache is emptied past it).
const ownerCacheMax = 100_000

type ownerEntry struct {
	owner string
	epoch uint64
	until time.Time
}

// topicByName returns the active topic name, activating it, or a
// NotOwnerError when another node owns it (remembered for a while). A
// topic whose owner is gone is moved to a live node first (takeOver).
func (n *Member) TopicByName(name routing.TopicName) (*actors.Topic, error) {
	uri := name.String()
	if e, ok := n.cachedOwner(uri); ok {
		if !n.ownerGone(e.owner) {
			n.moveOffSilentSoon(name, e.owner)
			return nil, &actors.NotOwnerError{Topic: uri, Owner: e.owner, Epoch: e.epoch}
		}
		n.forgetOwner(uri)
	}
	t, err := n.topics.TopicByName(name)
	var other *actors.NotOwnerError
	if errors.As(err, &other) {
		if n.moveOffLost(name, other.Owner) {
			t, err = n.topics.TopicByName(name)
		}
		if errors.As(err, &other) {
			n.rememberOwner(uri, other.Owner, other.Epoch)
		}
	}
	return t, err
}

// forgetOwner forgets which node owns topic uri.
func (n *Member) forgetOwner(uri string) {
	n.ownersMu.Lock()
	delete(n.owners, uri)
	n.ownersMu.Unlock()
}

// cachedOwner returns the node that owns topic uri (and the layout epoch
// it learned that at) if this node remembers that another one does.
func (n *Member) cachedOwner(uri string) (ownerEntry, bool) {
	n.ownersMu.Lock()
	defer n.ownersMu.Unlock()
	e, ok := n.owners[uri]
	if !ok || !n.clock.Now().Before(e.until) {
		return ownerEntry{}, false
	}
	return e, true
}

// rememberOwner notes that owner, another node, owns topic uri (as of
// layout epoch).
func (n *Member) rememberOwner(uri, owner string, epoch uint64) {
	n.ownersMu.Lock()
	defer n.ownersMu.Unlock()
	if len(n.owners) >= ownerCacheMax || n.owners == nil {
		n.owners = map[string]ownerEntry{}
	}
	n.owners[uri] = ownerEntry{owner: owner, epoch: epoch, until: n.clock.Now().Add(ownerCacheTTL)}
}

// remoteOwner returns the node that owns topic name when it is another
// one: without a metadata read when the topic is active here or its owner
// is remembered. A topic whose owner is gone is moved first.
func (n *Member) RemoteOwner(name routing.TopicName) (string, bool) {
	name.Scheme = routing.SchemeScalable // a topic is known by its path whatever the scheme (actors.Manager.Topic)
	uri := name.String()
	if _, active := n.topics.Active(uri); active {
		return "", false
	}
	if e, ok := n.cachedOwner(uri); ok && !n.ownerGone(e.owner) {
		n.moveOffSilentSoon(name, e.owner)
		return e.owner, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	rec, _, err := n.meta.Topic(ctx, name)
	owner := actors.LayoutOwner(rec.Layout)
	if err == nil && !n.Owns(owner) && n.moveOffLost(name, owner) {
		rec, _, err = n.meta.Topic(ctx, name)
		owner = actors.LayoutOwner(rec.Layout)
	}
	if err == nil && !n.Owns(owner) {
		n.rememberOwner(uri, owner, rec.Layout.Epoch)
		return owner, true
	}
	return "", false // here, or not found: the operation answers
}

// nsPoliciesSubject carries the name of a namespace whose policies a node
// changed, to the other nodes.
const nsPoliciesSubject = "braid.cluster.namespace-policies"

func (n *Member) onNamespacePolicies(m *nats.Msg) {
	if string(m.Header.Get("Braid-Node")) == n.nodeID {
		return // applied here already
	}
	ns, err := routing.ParseNamespace(string(m.Data))
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	if err := n.topics.ReapplyNamespace(ctx, ns); err != nil {
		n.log.Error("applying namespace policies changed on another node", "namespace", ns.String(), "err", err)
	}
}

// announceNamespacePolicies tells the other nodes that ns's policies changed.
func (n *Member) AnnounceNamespacePolicies(ns string) {
	_ = n.nc.PublishMsg(&nats.Msg{Subject: nsPoliciesSubject, Header: nats.Header{"Braid-Node": []string{n.nodeID}}, Data: []byte(ns)})
}

// Target returns the node a request for a topic owned by owner goes to,
// or why it cannot go: it was forwarded already (a forward that meets a
// node that does not own the topic, the owner having changed since, is
// not sent on: no loops), or the owner is down (a request to a node that
// is gone goes unanswered, and its client cannot tell whether it was
// taken; refused, it is resent once the topic has moved).
func (n *Member) Target(owner string, forwarded bool) (string, error) {
	node := n.OwnerNode(owner)
	switch {
	case forwarded || node == "" || node == n.nodeID:
		return "", api.Errorf(api.CodeUnavailable, "the topic's owner changed while the request was forwarded; retry")
	case !n.members.isLive(node) || n.members.expired(node):
		return "", api.Errorf(api.CodeUnavailable, "the topic is owned by node %s, which is down (its lease lapsed), and its key ranges could not be moved to a live node yet; retry", node)
	}
	return node, nil
}
