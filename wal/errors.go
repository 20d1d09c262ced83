package wal

import "errors"

var (
	// ErrCorrupt is returned (wrapped) by DecodeRecord when a frame is
	// empty, truncated, has an inconsistent length or fails its CRC (Read
	// and ReadRange report a stored frame that does so as a hole, ErrHole);
	// by Read and ReadRange when a frame is missing from the last file; by
	// Open when the directory holds
	// both a ".START" and an ".END" file; by the truncations when the frame
	// they must cut does not check out; and by AppendEncoded when it is
	// handed a frame that is not valid.
	ErrCorrupt = errors.New("braid/wal: corrupt record")

	// ErrUnsupportedVersion is returned (wrapped) by DecodeRecord, Read and
	// ReadRange when a frame starts with a version byte this package does
	// not read, and by Open when the log holds such a frame with a good CRC
	// (written by a newer release, or by an earlier one that stored one
	// record per entry). It is not an ErrCorrupt: the data may be fine for
	// another release.
	ErrUnsupportedVersion = errors.New("braid/wal: unsupported record version")

	// ErrClosed is returned by every method of a Log after Close, including
	// a second Close.
	ErrClosed = errors.New("braid/wal: log closed")

	// ErrNotFound is returned (wrapped) by Read and ReadRange for an offset
	// outside [FirstOffset, NextOffset), and by TruncateHead and
	// TruncateTail for a position outside the log.
	ErrNotFound = errors.New("braid/wal: offset not found")

	// ErrFailed is returned (wrapped together with the original cause) by
	// every write (Append, AppendEncoded, TruncateHead, TruncateTail, Sync)
	// after an earlier write or fsync failed. The state of the files is
	// then unknown (a failed fsync cannot be retried safely), so the owner
	// must Close the Log and Open it again, which repairs the tail.
	ErrFailed = errors.New("braid/wal: log failed, reopen it")
)
