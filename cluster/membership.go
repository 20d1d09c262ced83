package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/placement"
	"github.com/braidmq/braid/routing"
	"github.com/prometheus/client_golang/prometheus"
)

// Membership: every node holds a lease in the metadata store (a key per
// node, renewed every third of its time by compare-and-swap on its
// revision); a node whose lease lapsed is gone. The renewals carry the
// node's load, which placement reads (forward.go). The first node to
// start also serves the topics whose layouts name no owner
// (meta.ServingRecord): they were written before nodes had ids, when one
// node ran alone.

// nodeIDFile holds the node's id in its data directory.
const nodeIDFile = "node-id"

// resolveNodeID returns the node id of the data directory dir: the one its
// node-id file holds (want must match it, when given), or want (or a new
// random one), which it writes there.
func ResolveNodeID(dir, want string) (string, error) {
	path := filepath.Join(dir, nodeIDFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		have := strings.TrimSpace(string(b))
		if err := routing.ValidateName(have); err != nil {
			return "", fmt.Errorf("%s holds a bad node id %q: %w", path, have, err)
		}
		if want != "" && want != have {
			return "", fmt.Errorf("node id %q: the data directory %s belongs to node %q (%s); use that id or another directory", want, dir, have, path)
		}
		return have, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("reading the node id: %w", err)
	}
	id := want
	if id == "" {
		var r [4]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", err
		}
		id = "n" + hex.EncodeToString(r[:])
	}
	if err := routing.ValidateName(id); err != nil {
		return "", fmt.Errorf("node id %q: %w", id, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("writing the node id: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("writing the node id: %w", err)
	}
	return id, nil
}

// membership holds the node's lease and renews it.
type membership struct {
	n   *Member
	ttl time.Duration
	mu  sync.Mutex
	rec meta.NodeRecord
	rev uint64
	// lease is the lease's state machine (placement.Lease): whether the
	// node takes appends, and until when; guarded by mu, published to
	// validUntil after each change.
	lease placement.Lease
	// started says the renewal loop runs (leave waits for it).
	started bool

	stop chan struct{}
	done chan struct{}
	// kick asks the renewal loop for a round now (a node left: one may
	// take the entry role it held at once).
	kick      chan struct{}
	leaveOnce sync.Once
	stopOnce  sync.Once

	renewals, failures prometheus.Counter
	lostTotal          prometheus.Counter
	fencedTotal        prometheus.Counter
	rejoins            prometheus.Counter

	// lastAt and lastBytes are when the last renewal was made and the
	// node's appended bytes then (renewLoop's own).
	lastAt    time.Time
	lastBytes uint64
	// nodes counts the cluster's nodes by lease state, at the last renewal.
	nodes *prometheus.GaugeVec
	// live is the set of live nodes at the last renewal (nil before one),
	// and their records: where requests are forwarded and topics placed.
	live      atomic.Pointer[map[string]meta.NodeRecord]
	lapsed    atomic.Pointer[map[string]bool]
	all       atomic.Pointer[map[string]meta.NodeRecord] // every lease read, live or not
	countedAt atomic.Int64                               // when live and lapsed were read (unix ns, mono)

	// entryRole is the entry role's state machine (placement.Entry),
	// renewLoop's own (entry.go); entryUntil is its Until while it holds
	// the role (unix ns), for fenceEntry.
	entryRole  placement.Entry
	entryUntil atomic.Int64

	// validUntil is lease.ValidUntil (unix ns on the clock that never
	// steps, mono; 0: none): when the node stops taking appends unless it
	// renews its lease first.
	validUntil atomic.Int64

	// sightings judge the others' leases, and the entry role's, by this
	// node's clock (placement.Sightings); guarded by sightMu.
	sightMu   sync.Mutex
	sightings placement.Sightings
}

// publishLeaseLocked publishes the lease's state to validUntil, which
// fence reads. The caller holds mu.
func (m *membership) publishLeaseLocked() {
	until := m.lease.ValidUntil()
	if until.IsZero() {
		m.validUntil.Store(0)
		return
	}
	m.validUntil.Store(until.UnixNano())
}

// join takes the node's lease (refused while another run of the same id
// holds a live one) and starts renewing it.
func (n *Member) Join(ctx context.Context) error {
	m := &membership{n: n, ttl: n.cfg.LeaseTTL, lease: placement.Lease{TTL: n.cfg.LeaseTTL}, entryRole: placement.Entry{TTL: n.cfg.LeaseTTL}, sightings: placement.Sightings{TTL: n.cfg.LeaseTTL},
		stop: make(chan struct{}), done: make(chan struct{}), kick: make(chan struct{}, 1),
		renewals: prometheus.NewCounter(prometheus.CounterOpts{Name: "braid_node_lease_renewals_total",
			Help: "Renewals of this node's membership lease."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "braid_node_lease_renewal_failures_total",
			Help: "Renewals of this node's membership lease that failed (the store did not answer; the lease may lapse)."}),
		lostTotal: prometheus.NewCounter(prometheus.CounterOpts{Name: "braid_node_lease_lost_total",
			Help: "Times another run of this node id took its lease: this run stopped serving."}),
		fencedTotal: prometheus.NewCounter(prometheus.CounterOpts{Name: "braid_node_fenced_requests_total",
			Help: "Produce requests refused because the node's lease was not renewed in time (it may have been cut off)."}),
		rejoins: prometheus.NewCounter(prometheus.CounterOpts{Name: "braid_node_lease_rejoins_total",
			Help: "Renewals of this node's lease after it had run out (the node was stopped or cut off): it learned the layouts again before taking appends."}),
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "braid_cluster_nodes",
			Help: "The cluster's nodes by the state of their lease (live or lapsed), as this node saw them at its last renewal."}, []string{"state"}),
	}
	now, sent := n.clock.Now(), n.mono()
	// Starting until the first renewal (start): the node takes its lease
	// before it recovers its topics, and must not be given new ones
	// (requests for them would wait for it to serve).
	m.rec = meta.NodeRecord{ID: n.nodeID, Incarnation: n.cfg.Incarnation, NATSURL: n.cfg.ClientURL, ActorAddr: n.ActorAddr(), Started: now.UnixMilli(), Renewed: now.UnixMilli(),
		Expires: now.Add(m.ttl).UnixMilli(), Starting: true}
	// A run killed a moment ago leaves a lease that holds until it lapses:
	// a lease time, by this node's clock, from when this run first read
	// it unchanged (renewals by a run still alive keep it held).
	rev, err := n.meta.TakeNodeLease(ctx, m.rec, 0)
	for waitUntil := sent.Add(2 * m.ttl); errors.Is(err, meta.ErrNodeIDInUse) && n.mono().Before(waitUntil); {
		lapsed := uint64(0)
		if cur, _, err := n.meta.NodeLease(ctx, n.nodeID); err == nil && !m.holds(cur) {
			lapsed = cur.Rev
		} else {
			n.log.Warn("the node's lease is still held (by an earlier run, until it lapses, or by another process): waiting", "node", n.nodeID, "err", err)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(m.ttl / 6):
			}
		}
		now, sent = n.clock.Now(), n.mono()
		m.rec.Started, m.rec.Renewed, m.rec.Expires = now.UnixMilli(), now.UnixMilli(), now.Add(m.ttl).UnixMilli()
		rev, err = n.meta.TakeNodeLease(ctx, m.rec, lapsed)
	}
	if err != nil {
		if errors.Is(err, meta.ErrNodeIDInUse) {
			return fmt.Errorf("node id %s is in use by another running braid serve (stop it, or give this one another --node-id and data directory): %w", n.nodeID, err)
		}
		return fmt.Errorf("taking the membership lease of node %s: %w", n.nodeID, err)
	}
	m.rev = rev
	m.countNodes()
	m.lease.Taken(sent.Add(m.ttl))
	m.publishLeaseLocked()
	n.registry.MustRegister(m.renewals, m.failures, m.lostTotal, m.fencedTotal, m.rejoins, m.nodes,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "braid_node_entry",
			Help: "1 while this node holds the entry role (takes the clients' requests), 0 otherwise."}, func() float64 {
			if n.entry.Load() {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "braid_node_segments_owned",
			Help: "Active segments of the active topics that this node owns."}, func() float64 {
			return float64(n.topics.OwnedSegments(n.nodeID))
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "braid_node_appended_bytes_total",
			Help: "Key and payload bytes this node made durable, over every topic."}, func() float64 {
			return float64(n.topics.AppendedBytes())
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "braid_node_serving",
			Help: "1 on the node that serves the topics whose layouts name no owner (written before nodes had ids), 0 on the others."}, func() float64 {
			if n.serving.Load() {
				return 1
			}
			return 0
		}))
	n.members = m
	go m.watchLeases()
	return nil
}

// start starts renewing the lease (once the node serves: losing the lease
// stops what it serves), the first round at once: it records that the
// node no longer starts.
func (m *membership) start() {
	m.mu.Lock()
	m.started = true
	m.mu.Unlock()
	m.kickRenewal()
	go m.renewLoop()
}

func (m *membership) renewLoop() {
	defer close(m.done)
	tick := time.NewTicker(m.ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
		case <-m.kick:
		}
		if !m.renew() {
			return
		}
		m.tryEntry(m.n.clock.Now(), m.n.mono())
	}
}

// renew renews the lease once; false once it is lost for good.
func (m *membership) renew() bool {
	m.mu.Lock()
	rec, rev := m.rec, m.rev
	m.mu.Unlock()
	// The lease holds, by this node's clock, a lease time (less the
	// margin) from when the renewal was sent: before any other node read
	// it (placement.Sightings).
	now, sent := m.n.clock.Now(), m.n.mono()
	rec.Renewed, rec.Expires = now.UnixMilli(), now.Add(m.ttl).UnixMilli()
	bytes := m.n.topics.AppendedBytes()
	if m.lastAt.IsZero() {
		m.lastAt, m.lastBytes = time.UnixMilli(m.rec.Started), 0
	}
	// A round asked for out of turn (kickRenewal) may come moments after
	// the last: then the last rate is kept.
	rate, measured := placement.Rate(m.ttl, m.lastAt, m.lastBytes, now, bytes)
	if measured {
		rec.BytesPerSec = rate
	}
	rec.Segments = m.n.topics.OwnedSegments(rec.ID)
	rec.UnderReplicated = m.n.topics.UnderReplicated()
	rec.GroupsShort = int(m.n.groupsShort.Load())
	m.n.maybeSweepGroupReplicas(now)
	rec.CopyBytesLeft = m.n.copies.left.Load()
	rec.Draining = m.n.draining.Load()
	rec.Starting = false
	ctx, cancel := context.WithTimeout(context.Background(), m.ttl/3)
	newRev, err := m.n.meta.RenewNodeLease(ctx, rec, rev)
	cancel()
	switch {
	case err == nil:
		m.mu.Lock()
		m.rec, m.rev = rec, newRev
		// The lease ran out before this renewal (the node was stopped or
		// cut off): others may have moved its segments meanwhile. It
		// learns the layouts as they are before taking appends again; the
		// renewals (and the entry role) go on meanwhile, and the node
		// stays fenced until it is done.
		rejoin := m.lease.Renewed(sent, sent.Add(m.ttl))
		m.publishLeaseLocked()
		m.mu.Unlock()
		if measured {
			m.lastAt, m.lastBytes = now, bytes
		}
		m.countNodes()
		if rejoin {
			go m.rejoin()
		}
		m.renewals.Inc()
		return true
	case errors.Is(err, meta.ErrConflict) && m.ownWrite(rec.ID):
		// An earlier renewal timed out here but landed: go on from it.
		return true
	case errors.Is(err, meta.ErrConflict):
		// Another run of this id took the lease after it lapsed (this one
		// was cut off or stopped): it must not serve beside it.
		m.mu.Lock()
		m.lease.TakenOver()
		m.publishLeaseLocked()
		m.mu.Unlock()
		m.lostTotal.Inc()
		m.n.log.Error("another run of this node id took its membership lease: this node stops taking requests",
			"node", rec.ID, "err", err)
		m.n.cfg.StopTaking()
		return false
	default:
		m.failures.Inc()
		m.n.log.Warn("renewing the membership lease failed; trying again", "node", rec.ID,
			"expires", time.UnixMilli(m.rec.Expires).UTC().Format(time.RFC3339Nano), "err", err)
		return true
	}
}

// rejoin stops every active topic (another node may have moved any of
// them while the node's lease had run out, and the store may not say
// which right now) and forgets which nodes owned what: the next request
// for a topic reads its record again.
func (m *membership) rejoin() {
	n := m.n
	m.rejoins.Inc()
	n.ownersMu.Lock()
	n.owners = nil
	n.ownersMu.Unlock()
	begin := m.n.clock.Now()
	stopped := n.topics.ReleaseAll()
	n.log.Warn("the membership lease had run out before it was renewed: every active topic was stopped, to be read again on its next request",
		"node", n.nodeID, "stopped", len(stopped), "took", time.Since(begin))
	// Appends again, until the expiry of the last renewal (less the margin).
	m.mu.Lock()
	m.lease.Rejoined()
	m.publishLeaseLocked()
	m.mu.Unlock()
	go n.reactivate(stopped)
}

// reactivate activates again the topics a lapsed lease stopped (those
// still homed here: another node's are left to it), so that what their
// controllers do while no request comes goes on: a topic that was one
// copy short stayed so until its next request (found by the fault suite:
// a home cut off one way, its topic moved with two copies, every node's
// lease lapsing while the metadata store elected again after the heal).
// Eight at a time; a topic whose record cannot be read yet (the store
// still electing) is tried again every second, ten times.
func (n *Member) reactivate(uris []string) {
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, uri := range uris {
		name, err := routing.ParseTopic(uri)
		if err != nil {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			for try := 1; ; try++ {
				_, err := n.topics.TopicByName(name)
				switch {
				case err == nil || errors.As(err, new(*actors.NotOwnerError)):
					return
				case try < reactivateTries && api.AsError(err).Code == api.CodeUnavailable:
					wait := make(chan struct{})
					n.clock.AfterFunc(time.Second, func() { close(wait) })
					<-wait
				default:
					n.log.Warn("activating again a topic its lapsed lease stopped failed; its next request will", "topic", uri, "err", err, "tries", try)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// reactivateTries bounds reactivate's tries of a topic.
const reactivateTries = 10

// kickRenewal has the renewal loop run a round now, unless one is asked
// for already.
func (m *membership) kickRenewal() {
	if m == nil || m.kick == nil {
		return
	}
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// awaitDrainingLease has the renewal loop run a round now and waits until
// a renewal has recorded that the node drains, for two leases at most.
func (m *membership) awaitDrainingLease(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*m.ttl)
	defer cancel()
	m.kickRenewal()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		m.mu.Lock()
		recorded := m.rec.Draining
		m.mu.Unlock()
		if recorded {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-m.done:
			return fmt.Errorf("the lease is no longer renewed")
		}
	}
}

// nodesChangedSubject carries the id of a node that left the cluster
// cleanly: every node reads the leases again.
const nodesChangedSubject = "braid.cluster.nodes-changed"

// countNodes updates braid_cluster_nodes from the leases.
func (m *membership) countNodes() {
	ctx, cancel := context.WithTimeout(context.Background(), m.ttl/3)
	defer cancel()
	nodes, err := m.n.meta.Nodes(ctx)
	if err != nil {
		return // the next renewal counts them
	}
	// Requests for a lapsed node's topics are refused at once, so a lease
	// late by a moment (a node busy or paused for a renewal or two) is not
	// taken for a loss: lapsed means lapsed for a third of a lease.
	live, lapsed := map[string]meta.NodeRecord{}, map[string]bool{}
	all := map[string]meta.NodeRecord{}
	now := m.n.mono()
	for _, r := range nodes {
		all[r.ID] = r
		switch placement.Classify(m.leaseExpiry(r), now, m.ttl) {
		case placement.Live:
			live[r.ID] = r
		case placement.Lapsed:
			lapsed[r.ID] = true
		}
	}
	m.live.Store(&live)
	m.lapsed.Store(&lapsed)
	m.all.Store(&all)
	m.countedAt.Store(now.UnixNano())
	m.nodes.WithLabelValues("live").Set(float64(len(live)))
	m.nodes.WithLabelValues("lapsed").Set(float64(len(lapsed)))
}

// isLive reports whether node may be live: false only when its lease had
// lapsed at this node's last renewal (a node that joined since is not
// known yet, and is let be tried).
func (m *membership) isLive(node string) bool {
	if m == nil {
		return true
	}
	lapsed := m.lapsed.Load()
	return lapsed == nil || !(*lapsed)[node]
}

// expired reports whether node's lease, as last read, has run out by now
// (false while this node's own lease is not current: its view of the
// others is as stale as its own renewal, the store may be down for all).
func (m *membership) expired(node string) bool {
	if m == nil || m.n.mono().UnixNano() >= m.validUntil.Load() {
		return false
	}
	r, ok := m.liveView()[node]
	return ok && !m.holds(r)
}

func (m *membership) liveView() map[string]meta.NodeRecord {
	if live := m.live.Load(); live != nil {
		return *live
	}
	return nil
}

// liveNodes returns the live nodes' records, read again when the last
// reading is older than maxAge.
func (m *membership) liveNodes(maxAge time.Duration) []meta.NodeRecord {
	if m == nil {
		return nil
	}
	// A view with fewer nodes than the cluster was configured with (it is
	// forming, or a node is down) is read again each time.
	stale := m.n != nil && len(m.liveView()) < 1+len(m.n.cfg.Routes)
	if m.n != nil {
		if stale || m.n.mono().Sub(time.Unix(0, m.countedAt.Load())) > maxAge {
			m.countNodes()
		}
	}
	live := m.live.Load()
	if live == nil {
		return nil
	}
	// The view may be older than the leases it holds when reading them
	// again failed (the metadata store electing a leader): a node whose
	// recorded lease has run out since is left out, so that nothing is
	// placed on a node the same view takes for gone (Evict).
	out := make([]meta.NodeRecord, 0, len(*live))
	for _, r := range *live {
		if m.n != nil && r.ID != m.n.nodeID && !m.holds(r) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// actorAddrOf returns the actor address of a live node, or UNAVAILABLE
// when its lease lapsed (its data returns with it) or it has none.
func (m *membership) actorAddrOf(node string) (string, error) {
	if m == nil {
		return "", api.Errorf(api.CodeUnavailable, "node %s: this node is not in a cluster", node)
	}
	r, ok := m.liveView()[node]
	if !ok || !m.holds(r) {
		// Not live at the last count: read its lease now (it may have
		// joined or renewed since).
		ctx, cancel := context.WithTimeout(context.Background(), m.ttl/3)
		cur, _, err := m.n.meta.NodeLease(ctx, node)
		cancel()
		if err != nil || !m.holds(cur) {
			return "", api.Errorf(api.CodeUnavailable, "node %s is down (its lease lapsed): its sealed segments are readable again when it returns", node)
		}
		r = cur
	}
	if r.ActorAddr == "" {
		return "", api.Errorf(api.CodeUnavailable, "node %s has no actor listener", node)
	}
	return r.ActorAddr, nil
}

// ownWrite reports whether the lease record is still this run's (written
// by a renewal whose answer was lost) and, if so, adopts its revision.
func (m *membership) ownWrite(id string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), m.ttl/3)
	defer cancel()
	cur, rev, err := m.n.meta.NodeLease(ctx, id)
	if err != nil {
		return true // unknown: the next renewal tells
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur.Started != m.rec.Started || cur.NATSURL != m.rec.NATSURL {
		return false
	}
	// When the write was sent is not known here: the lease keeps the
	// expiry it had, and the next renewal moves it on.
	m.rec, m.rev = cur, rev
	return true
}

// stopRenewing stops the renewal loop (once) and waits for it.
func (m *membership) stopRenewing() {
	m.stopOnce.Do(func() {
		m.mu.Lock()
		started := m.started
		m.mu.Unlock()
		close(m.stop)
		if started {
			<-m.done
		}
	})
}

// fence returns UNAVAILABLE when the node's lease is not current: it could
// not renew it in time (cut off from the metadata store, or stopped), so
// another node may soon take over what it owns and it must not take an
// append that the other would not see. nil on a node without membership.
func (n *Member) Fence() error {
	m := n.members
	if m == nil {
		return nil
	}
	until := m.validUntil.Load()
	if n.mono().UnixNano() < until {
		return nil
	}
	m.fencedTotal.Inc()
	return n.leaseFenced()
}

func (n *Member) leaseFenced() error {
	return fencedError{api.Errorf(api.CodeUnavailable, "node %s has not renewed its membership lease in time (cut off from the metadata store?): it takes no appends until it does; retry",
		n.nodeID)}
}

// fencedError is a refusal by fence or fenceEntry: nothing was taken.
type fencedError struct{ err error }

func (e fencedError) Error() string { return e.err.Error() }
func (e fencedError) Unwrap() error { return e.err }

// isFenced reports whether err is a fence's refusal.
func IsFenced(err error) bool {
	var f fencedError
	return errors.As(err, &f)
}

// fenceEntry returns UNAVAILABLE when this node holds the entry role but
// has not renewed it in time: another node may hold it now, and requests
// taken by both could reach an owner out of order. nil when it is current
// (or the node is not the entry node: it then takes no clients' requests).
func (n *Member) FenceEntry() error {
	m := n.members
	if m == nil || !n.entry.Load() || n.mono().UnixNano() < m.entryUntil.Load() { // placement.Entry.Fenced
		return nil
	}
	m.fencedTotal.Inc()
	return n.entryFenced()
}

func (n *Member) entryFenced() error {
	return fencedError{api.Errorf(api.CodeUnavailable, "node %s has not renewed its entry role in time: it takes no requests until it does; retry", n.nodeID)}
}

// FenceRequests is FenceEntry and then Fence for k requests about to be
// taken together, with one reading of the clock: FenceEntry's refusal
// if it refuses, else Fence's; each of the k is counted as refused. A
// front-end that checks right before it appends a read's requests checks
// no earlier than when it took each of them.
func (n *Member) FenceRequests(k int) error {
	m := n.members
	if m == nil {
		return nil
	}
	now := n.mono().UnixNano()
	var err error
	switch {
	case n.entry.Load() && now >= m.entryUntil.Load(): // placement.Entry.Fenced
		err = n.entryFenced()
	case now >= m.validUntil.Load():
		err = n.leaseFenced()
	default:
		return nil
	}
	m.fencedTotal.Add(float64(k))
	return err
}

// leave stops renewing and releases the lease, so that the others see the
// node gone at once.
func (m *membership) leave() {
	m.leaveOnce.Do(m.leaveNow)
}

func (m *membership) leaveNow() {
	m.stopRenewing()
	m.mu.Lock()
	rec, rev, lost := m.rec, m.rev, m.lease.Lost
	m.mu.Unlock()
	if lost {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if m.n.entry.Load() {
		// Hand the entry role over: its record lapses now, and the others,
		// told below, take it at once rather than when its lease runs out
		// (plain clients would find no responders meanwhile).
		now := m.n.clock.Now()
		if _, err := m.n.meta.RenewEntry(ctx, rec.ID, now, placement.Released(now), m.entryRole.Rev); err != nil {
			m.n.log.Warn("handing the entry role over failed: another node takes it when its lease lapses", "node", rec.ID, "err", err)
		} else {
			m.n.log.Info("entry role handed over: another node takes the clients' requests", "node", rec.ID)
		}
	}
	if err := m.n.meta.ReleaseNodeLease(ctx, rec, rev); err != nil {
		m.n.log.Warn("releasing the membership lease failed: the others see the node gone when it lapses", "node", rec.ID, "err", err)
		return
	}
	// The others read the leases again now rather than at their next
	// renewal: placement passes the node by at once.
	_ = m.n.nc.Publish(nodesChangedSubject, []byte(rec.ID))
	_ = m.n.nc.Flush()
}

// claimServing claims the serving role, or learns who holds it.
func (n *Member) ClaimServing(ctx context.Context) error {
	rec, err := n.meta.ClaimServing(ctx, n.nodeID, n.clock.Now())
	if err != nil {
		return fmt.Errorf("claiming the serving role: %w", err)
	}
	n.serving.Store(rec.Node == n.nodeID)
	n.servingNode = rec.Node
	return nil
}

// nodeList answers node.list.
func (n *Member) NodeList(ctx context.Context, _ []byte) (any, error) {
	nodes, err := n.meta.Nodes(ctx)
	if err != nil {
		return nil, meta.APIError(err, "nodes")
	}
	serving, err := n.meta.Serving(ctx)
	if err != nil && !errors.Is(err, meta.ErrNotFound) {
		return nil, meta.APIError(err, "the serving node")
	}
	entry, err := n.meta.Entry(ctx)
	if err != nil && !errors.Is(err, meta.ErrNotFound) {
		return nil, meta.APIError(err, "the entry node")
	}
	if !n.mono().Before(n.members.entryExpiry(entry)) {
		entry.Node = "" // lapsed, by this node's clock: nobody holds it
	}
	ms := func(v int64) string { return time.UnixMilli(v).UTC().Format(time.RFC3339Nano) }
	reply := api.NodeListReply{Nodes: []api.NodeInfo{}, Serving: serving.Node, Entry: entry.Node}
	for _, r := range nodes {
		reply.Nodes = append(reply.Nodes, api.NodeInfo{ID: r.ID, Incarnation: r.Incarnation, NATSURL: r.NATSURL, Live: n.members.holds(r),
			Serving: r.ID == serving.Node, Entry: r.ID == entry.Node, Started: ms(r.Started), Renewed: ms(r.Renewed), Expires: ms(r.Expires),
			Segments: r.Segments, BytesPerSec: r.BytesPerSec, UnderReplicated: r.UnderReplicated, CopyBytesLeft: r.CopyBytesLeft, GroupsShort: r.GroupsShort,
			Draining: r.Draining, Starting: r.Starting})
	}
	slices.SortFunc(reply.Nodes, func(a, b api.NodeInfo) int { return strings.Compare(a.ID, b.ID) })
	return reply, nil
}

// StopRenewing stops the lease's renewals (Leave does, and tests of a node
// cut off from the store).
func (n *Member) StopRenewing() {
	if n.members != nil {
		n.members.stopRenewing()
	}
}

// Renew renews the lease once, now, outside the renewal loop; false once
// the lease is lost for good (another run of the node's id took it).
func (n *Member) Renew() bool { return n.members.renew() }

// Lease returns the lease's record as this node last wrote it, and its
// revision.
func (n *Member) Lease() (meta.NodeRecord, uint64) {
	m := n.members
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rec, m.rev
}
