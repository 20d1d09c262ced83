package meta

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ServingRecord names the node that serves the topics whose layouts name
// no owner (written before nodes had ids: their bucket logs are on the
// disk of the node that ran alone then). It is claimed once, by the first
// node that starts, and stays with that node id across its restarts.
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
