package meta

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ServingRecord names the node that serves the cluster's topics: the one
// node whose data directory holds their bucket logs. It is claimed once,
// by the first node that starts, and stays with that node id across its
// restarts: another node cannot take the topics over while their logs are
// on that node's disk (moving them is sealing in metadata and successors
// elsewhere, which placement will do).
type ServingRecord struct {
	Node  string `json:"node"`
	Since int64  `json:"since"` // unix ms
}

const servingKey = "cluster.serving"

// ClaimServing claims the serving role for node if nobody holds it, and
// returns the holder (node itself, or the node that claimed it first).
func (s *Store) ClaimServing(ctx context.Context, node string, now time.Time) (ServingRecord, error) {
	rec := ServingRecord{Node: node, Since: now.UnixMilli()}
	_, err := s.create(ctx, servingKey, rec)
	if err == nil {
		return rec, nil
	}
	if !errors.Is(err, ErrExists) {
		return ServingRecord{}, err
	}
	// A replica that has not applied the create yet may answer the read
	// (the bucket allows direct reads from any replica): ask again.
	for {
		var held ServingRecord
		_, err := s.get(ctx, servingKey, &held)
		if !errors.Is(err, ErrNotFound) {
			return held, err
		}
		select {
		case <-ctx.Done():
			return ServingRecord{}, fmt.Errorf("%w (the record exists: a create of it failed)", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Serving returns the serving record; ErrNotFound before any claim.
func (s *Store) Serving(ctx context.Context) (ServingRecord, error) {
	var held ServingRecord
	_, err := s.get(ctx, servingKey, &held)
	return held, err
}
