// Package consumers owns Braid's subscriptions on the server side: the
// consumer-group actor of each (topic, subscription) and the state it keeps
// in its own WAL — ack cursors per unit, the drained segments, the start
// position — together with assignment of units to consumers, handoff of
// units between consumers, and the ordering rule (DESIGN.md §1) applied per
// subscription. Stream groups (group.go) give ordered delivery with
// cumulative acknowledgement per unit; queue groups (queue.go, through
// QueueManager) share every unit between their consumers with individual
// acks, nacks, an ack timeout and dead letters, keeping at most a window of
// offsets per unit in memory. Checkpoint consumers have no group: they read
// bucket logs directly (the cluster layer's read endpoint).
//
// It does not own the messages (the bucket logs, reached through Source),
// the layout (the topic controller's; read through Source), NATS (the
// cluster layer decodes requests, calls Manager and encodes the replies), or
// which node runs which group.
//
// # Pure parts
//
// Assign (balanced, sticky, deterministic assignment), segmentDrained,
// withheldUnits, deliveryCounts, the record codec and the time-driven
// decisions (see Time) are plain functions over plain data. The readable
// units come from topology.ReadableUnits with the subscription's drained
// set, so a segment is delivered only once every ancestor is drained — an
// empty sealed segment is drained at once, but its children still wait for
// its own ancestors.
//
// # The group actor
//
// One protoactor actor per subscription; every field is touched from its
// goroutine only. Per readable unit it keeps the ack cursor (next offset
// not acknowledged, durable), the delivery cursor (next offset to hand out)
// and the owner (durable, see below). Assign says where a unit should go
// (its target); the unit moves only when its owner has durably
// acknowledged everything it was delivered from it, or has left or died —
// until then it is "pending handoff": the owner may still ack, nobody gets
// new messages from it.
//
// A consumer silent for its session timeout (no fetch, no ack, no parked
// fetch) is dead; Leave is the same at once. Its units rewind their delivery
// cursors to their ack cursors and go to the next owner, which receives the
// unacknowledged messages again with Deliveries incremented. Delivery counts
// live in memory: after a restart of the group, redelivered messages start
// over at Deliveries = 1.
//
// # Owners across restarts
//
// A unit's owner is written to the log (an owners record) whenever it
// changes, before the new owner is delivered anything, and it is part of
// snapshots. After a restart the group cannot tell how far an owner got:
// delivery cursors are not durable, and the durable ack cursor lags what
// the owner's application acknowledged (acks are batched; those in flight
// when the node stopped are lost). So every previous owner the log names is
// awaited: its units stay with it — Assign spreads the units over the live
// consumers and the awaited ones, and settle never moves a unit away from
// an awaited owner — until it joins again or its grace passes: its session
// timeout (recorded with its ownership; the group's default otherwise)
// from the group's start. A previous owner that leaves is released at
// once.
//
// An owner that joins again keeps its units and receives them again from
// the durable ack cursor; the client drops what it had already returned and
// sends again the acks it held (it holds acks of offsets the server has not
// delivered again since the re-join). Such a restored unit also carries
// restoredUntil, its next offset at the group's start, a bound of what the
// owner may have been delivered before: it does not move to another
// consumer before its ack cursor reaches that bound, and while it is being
// handed over its owner still receives the offsets below it (and nothing
// past), so that it can acknowledge them again. So a message acknowledged
// by the application is not delivered to a second consumer across a
// restart, as long as its owner comes back within its grace.
//
// An owner that does not come back in time is declared dead, as a silent
// consumer is: its units move to other consumers from their durable ack
// cursors, and what it had returned to its application without a durable
// ack is delivered again to them (at-least-once, by design: the handoff
// rule lets a unit move when its owner is declared dead).
//
// Acks are group-committed: valid acks join a pending batch, a flushNow
// message is queued behind them, and the flush writes one record and only
// then answers the acks and applies them. Only durable ack cursors count
// for drained segments and handoffs, so a crash can never release a child
// segment, or hand a unit over, on an acknowledgement it takes back.
//
// A fetch that finds nothing and may wait is parked: it is retried when
// Source.Appended fires, after every flush, join, leave or death, and
// answered empty when its wait is over. A consumer has one fetch
// outstanding; a new one answers the parked one empty.
//
// # Time
//
// Time is an input, as raft's Tick is. A Manager reads the time and arms
// timers only through the clock.Clock given by WithClock (clock.Real when
// none is); its groups and its notices get the same clock. What depends
// on time is decided by plain functions of now over plain data
// (deadlines.go): which consumers are dead (silent for longer than their
// session timeout, no fetch parked), which parked fetches have waited
// their Wait, which previous owners' grace has ended, which queue entries
// are past their ack deadline or due again (nack delay and backoff,
// dead-letter retry), whether a broken log may be loaded again — and the
// earliest deadline among them. Every deadline is the first instant its
// decision holds: checked a tick earlier, nothing is due. Queue deadlines
// are in unix milliseconds, as the log records them.
//
// A group keeps one timer. As the last step of every message it arms it
// for the earliest deadline, moving it earlier for a new, earlier one
// (a fetch parked, a message nacked), never later; when it fires, the
// group applies what the functions decide at the clock's now
// (onDeadline), and arms it again. The deadline it was armed for may have
// gone since (a consumer heard from, a fetch answered, a message
// acknowledged): then it finds nothing due. The idle sweeper is a timer
// of the manager's clock, armed again after each sweep.
//
// Tests give the manager a clock.Fake and advance it: nothing waits on a
// real timer and no test measures elapsed time.
//
// # The group's WAL
//
// Records are drawn in record.go: created (start position, and for
// "latest" the cursors of the active units and the sealed segments as
// drained), update (cursors and drained segments of one flush), owners
// (the units whose owner changed, and the session timeouts of owners),
// snapshot (the whole state; logs written before owners were recorded hold
// snapshots without them, which still replay). Past CompactAfter records
// the group writes a snapshot and truncates the log before it.
//
// # Supervision
//
// The group replays its log in the Started handler, so a restart after a
// panic rebuilds from disk; Restarting closes the log and answers what was
// waiting (the request that panicked, unflushed acks) with UNAVAILABLE and
// parked fetches with an empty reply. Groups are spawned under a guardian
// that always restarts them: protoactor's default stops an actor after ten
// failures, which would drop its queued requests unanswered. A log that
// cannot be opened or replayed does not panic: the group refuses requests
// with UNAVAILABLE and tries to load again, at the first request a second
// or more (on its clock) after the last failure. A write failure panics
// (wal.ErrFailed asks for a reopen, which the restart does).
// Consumers live in memory: after a restart they get CONSUMER_UNKNOWN and
// join again, and what they had not acknowledged is delivered again — to
// them, since their units waited for them (see Owners across restarts).
//
// # Manager
//
// Manager is the entry point of the cluster layer: NewManager, then Join,
// Fetch, Ack, Leave and Stats with a Source and the api request; each
// validates the request (names, ranges, format), finds or spawns the
// group and queues the request; the callback runs later on the group's
// goroutine. Subscriptions lists a topic's subscriptions on disk,
// DeleteTopic removes them, Close stops every group after its queued
// requests (pending acks are flushed).
//
// # Subscription management
//
// Info (positions per unit and per consumer), Seek and DeleteSubscription
// are the admin's (subscriptions.go). planSeek (seek.go) turns a target —
// earliest, latest, a time, a message — into drained segments and unit
// positions; the group writes them as one snapshot of its state, so the
// log replays to them, and starts over from them. Both are refused while
// consumers are attached unless forced; forced, the consumers are detached
// and get a notice (notice.go): their requests are refused with it until
// they leave, rather than CONSUMER_UNKNOWN, on which a client would join
// again with positions that no longer hold (a queue seek keeps its
// consumers: they hold no positions). A delete moves the group's directory
// aside first (a group started meanwhile finds nothing), then stops the
// group and removes it.
//
// Retention: offsets removed from a bucket before this subscription
// acknowledged them are skipped (the ack cursor moves to the first retained
// offset). Deleted segments count as drained.
package consumers
