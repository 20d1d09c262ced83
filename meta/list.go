package meta

// Paged topic listing and the per-namespace topic count, for topic.list
// over namespaces of millions of topics.

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/braidmq/braid/routing"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrBadPage is returned (wrapped) by TopicsPage for a cursor that cannot
// be one or a limit below one.
var ErrBadPage = errors.New("braid/meta: bad page request")

// countShards is how many records a namespace's topic count is spread
// over: a create or delete changes the shard its topic name hashes to, so
// concurrent ones mostly change different records instead of retrying
// their compare and swap on one. TopicCount sums every count.<t>.<ns>.*
// record there is, so changing this number keeps the counts right.
const countShards = 16

// countRecord is one shard of a namespace's topic count. A shard may go
// below zero (a topic created before the counts existed, then deleted):
// only the sum means anything.
type countRecord struct {
	Count int64 `json:"count"`
}

// addCount adds delta to the count shard of name's namespace, by compare
// and swap, retrying while other writers win. It is not cut short by the
// caller's context ending (the record it counts is written already), only
// by OpTimeout.
func (s *Store) addCount(ctx context.Context, name routing.TopicName, delta int64) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	key := countKey(name.NamespaceName(), routing.TopicBucket(name, countShards))
	for {
		var c countRecord
		rev, err := s.get(ctx, key, &c)
		switch {
		case errors.Is(err, ErrNotFound):
			if _, err = s.create(ctx, key, countRecord{Count: delta}); errors.Is(err, ErrExists) {
				continue // created meanwhile: add to it
			}
		case err == nil:
			c.Count += delta
			if _, err = s.update(ctx, key, c, rev); errors.Is(err, ErrConflict) {
				continue
			}
		}
		return err
	}
}

// purgeTopic purges a topic record at the revision it reads, again while
// the record changes under it (a layout update): so only one of two
// concurrent deletes removes it. ErrNotFound if there is no record. The
// record is not decoded: one that does not decode is purged all the same.
func (s *Store) purgeTopic(ctx context.Context, key string) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	for {
		e, err := s.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return fmt.Errorf("%w: %s", ErrNotFound, key)
		}
		if err != nil {
			return timedOut(ctx, fmt.Errorf("read: %w", err))
		}
		err = s.kv.Purge(ctx, key, jetstream.LastRevision(e.Revision()))
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // changed since the read
		}
		if err != nil {
			return timedOut(ctx, err)
		}
		return nil
	}
}

// TopicCount is the number of topics of a namespace, from its count
// shards, without listing them. It is exact but for crashes (or store
// failures) between a topic's record write and its count update (see
// CreateTopic and DeleteTopic), and for topics created before the counts
// existed, which were never counted.
func (s *Store) TopicCount(ctx context.Context, ns routing.NamespaceName) (int64, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	filter := "count." + ns.Tenant + "." + ns.Namespace + ".*"
	w, err := s.kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return 0, timedOut(ctx, fmt.Errorf("braid/meta: read %s: %w", filter, err))
	}
	defer w.Stop()
	var total int64
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return 0, timedOut(ctx, fmt.Errorf("braid/meta: read %s: the watch stopped", filter))
			}
			if e == nil { // every shard's current value is in
				return total, nil
			}
			var c countRecord
			if err := json.Unmarshal(e.Value(), &c); err != nil {
				return 0, fmt.Errorf("%w: %s: %v", ErrCorrupt, e.Key(), err)
			}
			total += c.Count
		case <-ctx.Done():
			return 0, fmt.Errorf("%w: reading %s: %v", ErrTimeout, filter, ctx.Err())
		}
	}
}

// TopicsPage lists at most limit topic URIs of a namespace, sorted by
// name, starting after cursor ("" is the start). next is the cursor of the
// following page, "" when there are no more topics. The cursor is opaque
// to callers (today it is the last name of the page, so a name given as
// a cursor starts the listing after it); one that is not a valid cursor
// is ErrBadPage. ErrNotFound if the namespace does not exist.
//
// Topic keys are spread over the namespace's topic buckets by a hash of
// their name, so no key order helps: every page reads every key of the
// namespace once (names only, no records) and keeps the limit+1 smallest
// names after the cursor in a heap. A page costs O(N) keys sent by the
// store and O(N log limit) time, and O(limit) memory of its own whatever
// N is. The keys are listed a group of topic buckets at a time (see
// pageFilters), which bounds what the NATS client buffers of a listing
// that outruns the heap to about a group's keys.
//
// Pages are not a snapshot: a topic created or deleted while a caller
// pages through may or may not be listed; every other topic is listed
// once.
func (s *Store) TopicsPage(ctx context.Context, ns routing.NamespaceName, cursor string, limit int) (uris []string, next string, err error) {
	if limit < 1 {
		return nil, "", fmt.Errorf("%w: limit %d, want at least 1", ErrBadPage, limit)
	}
	after, err := decodeCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	rec, err := s.Namespace(ctx, ns)
	if err != nil {
		return nil, "", err
	}
	// smallest holds the smallest limit+1 names after the cursor, the
	// greatest on top: one more than the page tells whether there is a
	// next page.
	smallest := make(nameHeap, 0, min(limit+1, 4096))
	for _, filters := range pageFilters(ns, rec.TopicBuckets) {
		err := s.listNames(ctx, filters, func(name string) {
			switch {
			case name <= after:
			case len(smallest) <= limit:
				heap.Push(&smallest, name)
			case name < smallest[0]:
				smallest[0] = name
				heap.Fix(&smallest, 0)
			}
		})
		if err != nil {
			return nil, "", err
		}
	}
	more := len(smallest) > limit
	if more {
		heap.Pop(&smallest)
	}
	names := []string(smallest)
	sort.Strings(names)
	uris = make([]string, len(names))
	for i, name := range names {
		uris[i] = routing.TopicName{Scheme: routing.SchemeScalable, Tenant: ns.Tenant, Namespace: ns.Namespace, Name: name}.String()
	}
	if more {
		next = encodeCursor(names[len(names)-1])
	}
	return uris, next, nil
}

// Listing a namespace's topic keys by groups of topic buckets: at most
// pageListings listings, of at most pageFiltersPerListing bucket filters
// each (a consumer's creation grows faster than its filters: 17 ms for
// 256, 1.8 s for 4096).
const (
	pageListings          = 16
	pageFiltersPerListing = 256
)

// pageFilters is the filters of the listings of a page of ns, whose topics
// are in buckets topic buckets: bucket b in listing b % pageListings. Each
// listing sends about 1/pageListings of the keys: what the NATS client
// holds of a listing it delivers faster than the page takes it in is at
// most that (and at most the server's flow-control window, 32 MiB on the
// wire). Measured at a million topics in 16 buckets, a server in another
// process, 2 CPUs: a page in 16 listings took 4.6-8 s and 10-19 MiB more
// client heap at its peak, in one listing 3.1-5 s and 35-125 MiB (as
// much as reading every name into memory). A namespace of one bucket, or
// of more than pageListings*pageFiltersPerListing, is listed in one.
func pageFilters(ns routing.NamespaceName, buckets int) [][]string {
	prefix := "topic." + ns.Tenant + "." + ns.Namespace + "."
	if buckets <= 1 || buckets > pageListings*pageFiltersPerListing {
		return [][]string{{prefix + "*.*"}}
	}
	groups := make([][]string, min(buckets, pageListings))
	for b := range buckets {
		g := b % len(groups)
		groups[g] = append(groups[g], prefix+strconv.Itoa(b)+".*")
	}
	return groups
}

// listNames calls visit with the topic name of every key matching
// filters, within ctx (which must have a deadline), and fails if the
// listing is cut short.
func (s *Store) listNames(ctx context.Context, filters []string, visit func(name string)) error {
	lister, err := s.kv.ListKeysFiltered(ctx, filters...)
	if err != nil {
		return timedOut(ctx, fmt.Errorf("braid/meta: list %s: %w", filters[0], err))
	}
	defer lister.Stop()
	seen := 0
	ch := lister.Keys()
	for {
		select {
		case k, ok := <-ch:
			if !ok {
				// The lister also ends its channel when ctx ends:
				// that is a cut listing, not the whole of it.
				if ctx.Err() != nil {
					return fmt.Errorf("%w: listing %s stopped after %d keys: %v", ErrTimeout, filters[0], seen, ctx.Err())
				}
				return nil
			}
			seen++
			visit(k[strings.LastIndexByte(k, '.')+1:])
		case <-ctx.Done():
			return fmt.Errorf("%w: listing %s stopped after %d keys: %v", ErrTimeout, filters[0], seen, ctx.Err())
		}
	}
}

// encodeCursor is the cursor of the page after name.
func encodeCursor(name string) string { return name }

// decodeCursor is the name a cursor starts after ("" before every name).
func decodeCursor(cursor string) (string, error) {
	if cursor == "" {
		return "", nil
	}
	if err := routing.ValidateName(cursor); err != nil {
		return "", fmt.Errorf("%w: cursor: %v", ErrBadPage, err)
	}
	return cursor, nil
}

// nameHeap is a max-heap of names.
type nameHeap []string

func (h nameHeap) Len() int           { return len(h) }
func (h nameHeap) Less(i, j int) bool { return h[i] > h[j] }
func (h nameHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *nameHeap) Push(x any)        { *h = append(*h, x.(string)) }
func (h *nameHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
