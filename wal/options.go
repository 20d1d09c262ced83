package wal

import (
	"fmt"
	"time"
)

// Durability says when appended records reach stable storage.
type Durability uint8

const (
	// DurabilityAlways fsyncs before Append returns. The zero value.
	DurabilityAlways Durability = iota
	// DurabilityInterval fsyncs every Options.SyncInterval in the
	// background; a crash loses at most that much.
	DurabilityInterval
	// DurabilityNone fsyncs only on Sync, Close and file roll.
	DurabilityNone
)

var durabilityNames = [...]string{
	DurabilityAlways:   "always",
	DurabilityInterval: "interval",
	DurabilityNone:     "none",
}

// ParseDurability parses "always", "interval" or "none".
func ParseDurability(s string) (Durability, error) {
	for d, name := range durabilityNames {
		if s == name {
			return Durability(d), nil
		}
	}
	return 0, fmt.Errorf("braid/wal: unknown durability %q (want always, interval or none)", s)
}

// String returns the name ParseDurability accepts.
func (d Durability) String() string {
	if int(d) < len(durabilityNames) {
		return durabilityNames[d]
	}
	return fmt.Sprintf("Durability(%d)", uint8(d))
}

// MarshalText implements encoding.TextMarshaler (JSON, YAML, flags).
func (d Durability) MarshalText() ([]byte, error) {
	if int(d) >= len(durabilityNames) {
		return nil, fmt.Errorf("braid/wal: invalid durability %d", uint8(d))
	}
	return []byte(d.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Durability) UnmarshalText(text []byte) error {
	parsed, err := ParseDurability(string(text))
	if err != nil {
		return err
	}
	*d = parsed
	return nil
}

// Defaults applied by Open to zero fields of Options.
const (
	DefaultSyncInterval = 50 * time.Millisecond
	DefaultSegmentBytes = 8 << 20
	DefaultPreallocate  = 1 << 20
	// minPreallocate is the first step of a log's preallocation (see
	// Options.Preallocate).
	minPreallocate = 64 << 10
)

// Options configure Open. The zero value is valid: DurabilityAlways and
// the defaults above.
type Options struct {
	Durability Durability
	// SyncInterval is the fsync period of DurabilityInterval. Default 50ms.
	SyncInterval time.Duration
	// SegmentBytes is the size past which the log rolls to a new file (a
	// target: the frame that crosses it stays in the old file, and a frame
	// holds up to 64 KiB of records). Default 8 MiB.
	SegmentBytes int
	// Preallocate is the most the tail file is filled with zeros ahead of
	// its end, under DurabilityAlways and DurabilityInterval: an fsync of
	// appends that land in space already written is a data-only sync
	// (fdatasync), which needs no journal commit, about a third quicker
	// here. A log extends its file a step at a time, each step half what
	// it has written since it was opened, from 64 KiB up to this, so an
	// idle log costs no disk; a write of more than 128 KiB gets none (its
	// sync moves enough that a journal commit more costs little). A roll and Close cut the zeros off; a crash
	// leaves them, and Open cuts them (RepairReport.ZeroBytes). Default
	// 1 MiB; negative turns it off.
	Preallocate int
	// OnHole, if set, is called once for every Hole the log finds: at Open
	// in the last file, and later in an older file as it is first read (or
	// a frame fails its check on read). It is called with the log's read
	// lock held, so it must not call the Log; log and count the hole.
	OnHole func(Hole)
	// FS is the file system the log's files are in; default OSFS.
	FS FS
	// Files, if set, holds the log's file descriptors in a cache shared
	// with other logs, which closes them when it needs room and opens
	// them again on use (see FileCache); nil keeps them open.
	Files *FileCache
	// Journal, if set (with DurabilityAlways), journals the log's writes:
	// in a round of a CommitGroup with this journal, the log's commits are
	// made durable by the journal's sync instead of its own (see Journal).
	// A log not under the journal's root, or on another file system,
	// syncs its own files as if it had none.
	Journal *Journal
}

func (o Options) withDefaults() (Options, error) {
	if int(o.Durability) >= len(durabilityNames) {
		return o, fmt.Errorf("braid/wal: invalid durability %d", uint8(o.Durability))
	}
	if o.FS == nil {
		o.FS = OSFS
	}
	if o.SyncInterval <= 0 {
		o.SyncInterval = DefaultSyncInterval
	}
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	switch {
	case o.Preallocate < 0 || o.Durability == DurabilityNone:
		o.Preallocate = 0
	case o.Preallocate == 0:
		o.Preallocate = DefaultPreallocate
	}
	return o, nil
}
