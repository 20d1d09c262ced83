package meta

// Paged topic listing and the per-namespace topic count, for topic.list
// over namespaces of millions of topics.

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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

// purgeTopic purges a record (a topic's, or a namespace's or tenant's) at the revision it reads, again while
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

// TopicsPage lists at most limit topic URIs of a namespace, starting
// after cursor ("" is the start). next is the cursor of the following
// page, "" when no topic follows. The cursor is opaque to callers; one
// that is not a valid cursor of the namespace is ErrBadPage, as is a limit
// below one. ErrNotFound if the namespace does not exist.
//
// Pages come in a stable order, not sorted by name: by topic bucket (the
// hash of its name that spreads a namespace's topic keys, see
// routing.TopicBucket), then by name within a bucket. Paging from "" to
// the end lists each topic once. A page with a next cursor holds limit
// topics; the cursor is the last one's bucket and name, so a page starts
// in the bucket where the previous one stopped.
//
// A page lists the keys (names only, no records) of the buckets it
// visits, one listing a bucket: from the cursor's bucket on, until it
// holds limit topics and knows whether one follows. In a namespace of N
// topics over B buckets that is about max(limit, N/B) keys, not N. But
// each listing also costs a scan of the store, however few keys it sends
// (see listWhole): when the listings a page would still take cost more
// than one of every key of the namespace (a small namespace, or one of
// few topics a bucket), the page lists every key of the namespace once
// instead. A namespace of one topic bucket lists all of its N keys for
// every page: a namespace meant for many topics should be created with
// more topic buckets (N/limit or more). A page keeps at most limit+1
// names in memory, whatever the store sends.
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
	buckets := max(rec.TopicBuckets, 1)
	if after.bucket >= buckets {
		return nil, "", fmt.Errorf("%w: cursor %q: bucket %d of a namespace of %d", ErrBadPage, cursor, after.bucket, buckets)
	}
	prefix := "topic." + ns.Tenant + "." + ns.Namespace + "."
	// smallest holds the first limit+1 topics after the cursor, the last
	// on top: one more than the page tells whether a topic follows.
	smallest := make(positionHeap, 0, min(limit+1, 4096))
	listed, seen := 0, 0 // buckets listed, and the keys they hold
	values := -1         // keys in the store, once read
	listings, read := 0, 0
	if pageStats != nil {
		defer func() { pageStats(listings, read) }()
	}
	for from := after.bucket; from < buckets && len(smallest) <= limit; {
		filter, to := prefix+strconv.Itoa(from)+".*", from+1
		if listed > 0 {
			if values < 0 {
				st, err := s.kv.Status(ctx)
				if err != nil {
					return nil, "", timedOut(ctx, fmt.Errorf("braid/meta: status: %w", err))
				}
				values = int(min(st.Values(), 1<<40))
			}
			if listWhole(limit+1-len(smallest), buckets-from, buckets, listed, seen, values) {
				filter, to = prefix+"*.*", buckets
			}
		}
		listings++
		err := s.listNames(ctx, filter, func(bucket, name string) {
			read++
			b, err := strconv.Atoi(bucket)
			if err != nil || b < from || b >= to {
				return // a bucket listed before (or not a bucket)
			}
			p := position{b, name}
			if p != after {
				// The cursor's own topic is not counted: its
				// bucket was not listed by chance.
				seen++
			}
			switch {
			case !after.less(p):
			case len(smallest) <= limit:
				heap.Push(&smallest, p)
			case p.less(smallest[0]):
				smallest[0] = p
				heap.Fix(&smallest, 0)
			}
		})
		if err != nil {
			return nil, "", err
		}
		listed += to - from
		from = to
	}
	more := len(smallest) > limit
	if more {
		heap.Pop(&smallest)
	}
	page := []position(smallest)
	sort.Slice(page, func(i, j int) bool { return page[i].less(page[j]) })
	uris = make([]string, len(page))
	for i, p := range page {
		uris[i] = routing.TopicName{Scheme: routing.SchemeScalable, Tenant: ns.Tenant, Namespace: ns.Namespace, Name: p.name}.String()
	}
	if more {
		next = encodeCursor(page[len(page)-1])
	}
	return uris, next, nil
}

// pageStats, when tests set it, is called after each page with the
// listings it took and the keys they sent.
var pageStats func(listings, keys int)

// The costs listWhole weighs, in the time the store takes
// to send a key (about 4 µs). Measured with a server in the same process,
// 2 CPUs: a listing of one filter that matches keys costs about 1 ms of
// its own and a scan of the store, about 4 ms at 20,000 keys in the store
// and 15-20 ms at 80,000, whatever it matches (a filter that matches none
// costs 0.3-1.5 ms). One listing of several filters (a filter a bucket)
// is no way out: with deleted records in the store (every count update
// deletes one), 32 filters took 197 ms where 32 listings took 63 ms.
const (
	listCostListing = 250 // a listing's own cost
	listCostScan    = 20  // keys in the store scanned in the time of one sent
)

// listWhole tells a page to list every key of its namespace (of buckets
// buckets) at once rather than its next bucket alone: need is how many
// more topics the page wants, rest how many buckets are left from the
// next; the page's listings so far took listed buckets (one at least),
// holding seen keys besides the cursor's; the store holds values keys. It
// does when the bucket listings the page would still take, at the
// density seen so far, cost more than one listing of every key.
func listWhole(need, rest, buckets, listed, seen, values int) bool {
	// Keys a bucket; none seen yet counts as half a key, so that empty
	// buckets make the estimate fall.
	density := max(float64(seen), 0.5) / float64(listed)
	scan := float64(values) / listCostScan
	// A bucket's listing scans the store only if the bucket has keys.
	visit := listCostListing + (1-math.Exp(-density))*scan + density
	visits := min(float64(rest), math.Ceil(float64(need)/density))
	return listCostListing+scan+density*float64(buckets) < visits*visit
}

// listNames calls visit with the bucket and the topic name of every key
// matching filter (a filter of topic keys), within ctx (which must have a
// deadline), and fails if the listing is cut short.
func (s *Store) listNames(ctx context.Context, filter string, visit func(bucket, name string)) error {
	lister, err := s.kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return timedOut(ctx, fmt.Errorf("braid/meta: list %s: %w", filter, err))
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
					return fmt.Errorf("%w: listing %s stopped after %d keys: %v", ErrTimeout, filter, seen, ctx.Err())
				}
				return nil
			}
			seen++
			j := strings.LastIndexByte(k, '.')
			rest := k[:max(j, 0)]
			visit(rest[strings.LastIndexByte(rest, '.')+1:], k[j+1:])
		case <-ctx.Done():
			return fmt.Errorf("%w: listing %s stopped after %d keys: %v", ErrTimeout, filter, seen, ctx.Err())
		}
	}
}

// position is where a topic comes in a namespace's pages: by bucket, then
// by name.
type position struct {
	bucket int
	name   string
}

func (p position) less(q position) bool {
	return p.bucket < q.bucket || p.bucket == q.bucket && p.name < q.name
}

// encodeCursor is the cursor of the page after p: "<bucket>.<name>"
// (names have no dots).
func encodeCursor(p position) string { return strconv.Itoa(p.bucket) + "." + p.name }

// decodeCursor is the position a cursor starts after: {0, ""} (before
// every topic) for "". Whether its bucket is one of the namespace's is the
// caller's check.
func decodeCursor(cursor string) (position, error) {
	if cursor == "" {
		return position{}, nil
	}
	bucket, name, ok := strings.Cut(cursor, ".")
	if !ok {
		return position{}, fmt.Errorf("%w: cursor %q: no bucket", ErrBadPage, cursor)
	}
	// Decimal digits, no sign, no leading zero, below 1<<20 (more than
	// any namespace has): what encodeCursor writes.
	b, err := strconv.Atoi(bucket)
	if err != nil || b < 0 || b >= 1<<20 || strconv.Itoa(b) != bucket {
		return position{}, fmt.Errorf("%w: cursor %q: bad bucket", ErrBadPage, cursor)
	}
	if err := routing.ValidateName(name); err != nil {
		return position{}, fmt.Errorf("%w: cursor: %v", ErrBadPage, err)
	}
	return position{b, name}, nil
}

// positionHeap is a max-heap of positions.
type positionHeap []position

func (h positionHeap) Len() int           { return len(h) }
func (h positionHeap) Less(i, j int) bool { return h[j].less(h[i]) }
func (h positionHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *positionHeap) Push(x any)        { *h = append(*h, x.(position)) }
func (h *positionHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
