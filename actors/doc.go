// Package actors runs Braid's topics on protoactor-go: one controller actor
// per topic owns its layout, one segment actor per active segment supervises
// one bucket actor per entry bucket, and each bucket actor owns one
// write-ahead log that it group-commits.
//
// What it owns: the life of a topic on this node — create, recover, split,
// merge, rebucket, delete — the produce path, and the reads of its logs
// (the compacted view's too). What it does not own: the DAG rules
// (topology), key routing (routing), the metadata store (meta), the open
// logs and group commit (logstore), the lifecycle of the logs' files —
// roll, retention, offload, compaction (lifecycle, which reaches the
// topics through lifecycle.go here) — subscriptions (consumers) and NATS
// (cluster).
//
// # The actors
//
//	Manager (plain Go, safe for concurrent use): topic handles by name
//	  controller "topic/<tenant>/<ns>/<name>"      layout, policies, KV compare-and-swap, layout push
//	    segment "seg-<id>"   (active segments only, "seg-<id>~<n>" after n restarts; OneForOne supervisor of its buckets)
//	      bucket "b-<n>"      one wal.Log, group commit, seal
//
// # Group commit
//
// A bucket actor queues every append it receives and sends itself one flush
// message. The mailbox is FIFO, so when the flush runs, every append that
// arrived before it is in the queue: they are written as one batch, synced
// once (per the durability mode) and only then acknowledged. Appends that
// arrive during the fsync form the next batch.
//
// # Changing the layout
//
// A change is asked for as data: a changeReq carries a topology.Op (split,
// merge, rebucket, delete, relocate, migrate, partitions), from an admin
// request (Manager.Change), the scaler or a relocation, never a function.
// The controller plans it (topology.PlanChange: the next layout and the
// steps to get there, each with how it is undone), places the segments it
// creates, then carries the steps out one by one (change.go), in the
// plan's order: spawn the new segments gated (their buckets hold back
// direct appends); seal the buckets of the segments it retires (each
// flushes what it accepted and holds what comes after); write the layout
// with compare-and-swap on the KV revision (the commit: a stale controller
// fails here); publish the routing snapshot under Topic.routeMu (so that
// afterwards no append routed by the old snapshot is on its way); retire
// the sealed segments' actors after a grace, remove the deleted ones';
// seal again (belt and braces); have every sealed bucket hand what it
// held to the successors owning the keys, in order; and only then open
// the new buckets; last, push the layout. A step up to the commit that
// fails undoes the change as the plan says (unseal: the held appends are
// appended where they were sent; abandon the spawned segments; and, for a
// failed compare-and-swap, restart to read the record again). Appends
// accepted before the seal sit in the sealed segment, which every ordered
// reader drains first (the ordering rule); appends that met the seal sit
// in the successor ahead of every append routed there directly. So a
// producer that knows nothing of layouts, pipelining many requests of one
// key, is never refused and never reordered (the producer rule of
// DESIGN.md §1).
//
// Seals and hand-overs are requests the controller makes with a future
// (RequestFuture) and the bucket answers to its sender; a bucket that is
// gone is the future's dead letter. Messages are data: no control-plane
// message carries a function. The one exception is the produce path's
// appendReq, whose sink (an interface, the producer's call) each bucket
// or committer tells where the records landed: answering an append by a
// future would cost a goroutine hand-over per append.
//
// A controller that crashes restarts and reads its record from the store
// (whatever failed may have left its memory behind the store's). As it
// restarts it fences routing (a snapshot that routes to no actor: appends
// are answered UNAVAILABLE and resent) and has every live bucket answer
// what it took, since a stopped actor drops its mailbox unanswered; its
// new segment actors are named apart from the old ones ("seg-<id>~<n>").
// Tests crash it after every step of a plan (Manager.afterStep).
//
// A producer that names the layout epoch it routed by (Braid-Epoch: the Go
// client) keeps the older contract: its appends that meet a seal, or whose
// key moved to a segment newer than that epoch, are refused with
// SEGMENT_SEALED and the new epoch, and it re-routes them itself.
//
// # Scaling
//
// Each bucket actor counts what it appends in a bucketMeter (messages, key
// and payload bytes, the key hashes per 1/64 of the segment's range, and a
// heavy-hitter summary for a single hot key); Topic.Read counts what
// subscribers read. Every evaluation interval the topic's scaler goroutine
// (scaler.go) takes the meters, feeds the pure scaling package's tracker,
// asks the SubscriptionsView for consumer counts and drained segments,
// calls scaling.Decide and sends the change to the controller as a
// changeReq, exactly like an admin request, so automatic and manual changes
// are serialized in the controller's mailbox. The decision's op
// (scaling.Decision.Op) is decided at the layout's epoch, so a change is
// refused (topology.ErrStale) if the layout moved on since the decision.
// Retention deletes go the same way;
// the controller then stops the deleted segments' actors and removes their
// logs. Policies (policies.go) are resolved topic, then namespace, then
// broker default, and applied live: the controller stores a topic's in its
// record by compare-and-swap, the namespace's are stored by the manager and
// pushed to every loaded topic's controller.
//
// # Reads
//
// Sealed segments have no actors: their logs are opened on demand by the
// log store, and readers (consumer groups) read any log directly, since a
// wal.Log is safe for concurrent use. A compacted topic's view is read
// here too (compacted.go): below a unit's horizon from the compacted log
// of the generation its compaction record names, which the compactor
// (package lifecycle) wrote; the compactor tells the topic of each new
// record (Topic.CompactionRecorded).
package actors
