package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// A closed file of a log can live on apart from it: copied out whole
// (OpenClosedFile, for the remote tier) and read back where it is kept
// (FileReader), with the checks a log's own reads make.

// OpenClosedFile opens the closed file of the log that starts at first (a
// FileInfo.First of ClosedFiles) for reading its bytes: from its first
// frame (after a trimmed head) to its end. The caller closes it. The file
// stays readable through it if the log removes it meanwhile.
func (l *Log) OpenClosedFile(first uint64) (r *io.SectionReader, close func() error, err error) {
	l.mu.RLock()
	v := l.view
	l.mu.RUnlock()
	i, found := slices.BinarySearch(v.files, first)
	if !found || i == len(v.files)-1 {
		return nil, nil, fmt.Errorf("%w: no closed file starts at offset %d in %s", ErrNotFound, first, l.dir)
	}
	f, err := l.fs.OpenFile(filepath.Join(l.dir, v.fileName(i)), os.O_RDONLY, 0)
	if err != nil {
		return nil, nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	start := v.fileStart(i)
	return io.NewSectionReader(f, start, info.Size()-start), f.Close, nil
}

// FileReader reads the records [first, next) of a closed file of a log
// kept apart from it (what OpenClosedFile read, stored elsewhere). It is
// safe for concurrent use.
type FileReader struct {
	r           io.ReaderAt
	first, next uint64
	index       frameIndex
	mu          sync.Mutex
	b           batch
}

// NewFileReader indexes the file r of size bytes that holds the offsets
// [first, next). A file that is not whole — its frames do not reach next,
// or any run of it is damaged — is refused (ErrCorrupt): a copy is made
// of a whole file and must come back whole.
func NewFileReader(r io.ReaderAt, size int64, first, next uint64) (*FileReader, error) {
	index := scanFrameIndex(r, size, first, next)
	if index.stopped != nil {
		return nil, index.stopped
	}
	if len(index.holes) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrCorrupt, index.holes[0].String())
	}
	if index.next != next {
		return nil, fmt.Errorf("%w: the file's frames end at offset %d, want %d", ErrCorrupt, index.next, next)
	}
	return &FileReader{r: r, first: first, next: next, index: index}, nil
}

// Bounds returns the offsets the file holds.
func (f *FileReader) Bounds() (first, next uint64) { return f.first, f.next }

// ReadRange is Log.ReadRange of the file: up to maxRecords records from
// from, within maxBytes (at least one), none at next; ErrCorrupt for a
// frame that does not check out, ErrNotFound outside [first, next].
func (f *FileReader) ReadRange(from uint64, maxRecords, maxBytes int) ([]Record, error) {
	if from == f.next {
		return nil, nil
	}
	if from < f.first || from > f.next {
		return nil, fmt.Errorf("%w: offset %d outside [%d, %d)", ErrNotFound, from, f.first, f.next)
	}
	end := f.next
	if maxRecords > 0 && uint64(maxRecords) < end-from {
		end = from + uint64(maxRecords)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var recs []Record
	total := 0
	for off := from; off < end; {
		ref, fend, count, ok := f.index.find(off)
		if !ok {
			return recs, fmt.Errorf("%w: offset %d is not in a frame", ErrCorrupt, off)
		}
		entry := make([]byte, fend-ref.pos)
		if _, err := f.r.ReadAt(entry, ref.pos); err != nil && !errors.Is(err, io.EOF) {
			return recs, err
		}
		size, n := binary.Uvarint(entry)
		if n <= 0 || size != uint64(len(entry)-n) {
			return recs, fmt.Errorf("%w: bad size prefix of the frame at byte %d", ErrCorrupt, ref.pos)
		}
		if err := f.b.parse(entry[n:]); err != nil {
			return recs, err
		}
		if f.b.first != ref.first || uint64(f.b.count()) != count {
			return recs, fmt.Errorf("%w: the frame at byte %d holds [%d, %d), want [%d, %d)", ErrCorrupt, ref.pos, f.b.first, f.b.last(), ref.first, ref.first+count)
		}
		for ; off < end && off < f.b.last(); off++ {
			body := f.b.body(off)
			n := frameHeaderLen + len(body)
			if len(recs) > 0 && maxBytes > 0 && total+n > maxBytes {
				return recs, nil
			}
			rec, err := decodeBody(slices.Clone(body))
			if err != nil {
				return recs, fmt.Errorf("%w (offset %d)", err, off)
			}
			recs = append(recs, rec)
			total += n
		}
	}
	return recs, nil
}
