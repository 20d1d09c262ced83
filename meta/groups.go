package meta

import (
	"context"
	"errors"
	"time"

	"github.com/braidmq/braid/routing"
	"github.com/nats-io/nats.go/jetstream"
)

// Group homes. A consumer group keeps its state in a log on one node's
// disk; in a cluster the node serving the group changes when its topic
// moves. The group's record names the node that holds its log (its home)
// and is changed by compare-and-swap when another node takes the state
// over, so that a stale copy left on an earlier home is never used.

// groupSubKey is the record key of a group of kind ("stream", "queue").
func groupSubKey(name routing.TopicName, kind, sub string) string {
	return subKey(name, kind+"-"+sub)
}

// GroupHome returns the record of a group and its revision (ErrNotFound:
// none yet).
func (s *Store) GroupHome(ctx context.Context, name routing.TopicName, kind, sub string) (SubscriptionRecord, uint64, error) {
	var r SubscriptionRecord
	rev, err := s.get(ctx, groupSubKey(name, kind, sub), &r)
	return r, rev, err
}

// CreateGroupHome records a new group homed on home (ErrExists: it has a
// record).
func (s *Store) CreateGroupHome(ctx context.Context, name routing.TopicName, kind, sub, home string) (uint64, error) {
	return s.create(ctx, groupSubKey(name, kind, sub), SubscriptionRecord{Topic: name.String(), Subscription: sub, Kind: kind,
		Created: time.Now().UTC(), Home: home})
}

// MoveGroupHome changes a group's home if its record is still at rev
// (ErrConflict otherwise).
func (s *Store) MoveGroupHome(ctx context.Context, name routing.TopicName, r SubscriptionRecord, home string, rev uint64) (uint64, error) {
	r.Home = home
	return s.update(ctx, groupSubKey(name, r.Kind, r.Subscription), r, rev)
}

// UpdateGroupRecord writes r if the group's record is still at rev
// (ErrConflict otherwise).
func (s *Store) UpdateGroupRecord(ctx context.Context, name routing.TopicName, r SubscriptionRecord, rev uint64) (uint64, error) {
	return s.update(ctx, groupSubKey(name, r.Kind, r.Subscription), r, rev)
}

// DeleteGroupHome removes the record of a deleted group (none is not an
// error): a group made again under its name starts on the node that
// serves it, with nothing to take over.
func (s *Store) DeleteGroupHome(ctx context.Context, name routing.TopicName, kind, sub string) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	err := s.kv.Purge(ctx, groupSubKey(name, kind, sub))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	return err
}
