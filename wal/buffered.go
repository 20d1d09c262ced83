package wal

import (
	"io"
	"io/fs"
	"os"
	"sync"
)

// A journaled log's tail file holds its appends in memory, not in the
// file, until a flush (bufferedFile): the journal has them durably, and a
// write to the file per commit round, a system call each, was most of
// what a round over many logs cost. They reach the file when they fill
// bufferedTailBytes, when the file is synced (a roll, Close, Sync, a
// truncation, a checkpoint of the journal) or closed. Reads see them as
// if they were in the file. After a crash, the kill of the process
// included, the journal's replay writes them to the file before the log
// opens; a checkpoint flushes every log before it removes journal files.
// So a log holds at most bufferedTailBytes, and all logs together at most
// what the journal holds since its last checkpoint.

// bufferedTailBytes is how much a journaled log's tail holds in memory
// before it writes it to its file.
const bufferedTailBytes = 64 << 10

// keptTailBuffer is the largest buffer a tail keeps once flushed.
const keptTailBuffer = 4 << 10

// bufferedFile is a File whose writes that extend what it holds in memory
// (the appends to a log's tail) stay in memory until flush; other writes
// (the zeros written ahead of the end) go to the file at once.
type bufferedFile struct {
	File
	mu sync.Mutex
	// Guarded by mu: buf holds bytes [at, at+len(buf)) of the file, not
	// yet written to it.
	buf []byte
	at  int64
}

func newBufferedFile(f File) *bufferedFile { return &bufferedFile{File: f} }

func (b *bufferedFile) end() int64 { return b.at + int64(len(b.buf)) }

// appendAt holds p, to be written at off: after what it holds, or, when
// off is not where that ends, once that is written.
func (b *bufferedFile) appendAt(p []byte, off int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf) > 0 && off != b.end() {
		if err := b.flushLocked(); err != nil {
			return err
		}
	}
	if len(b.buf) == 0 {
		b.at = off
	}
	b.buf = append(b.buf, p...)
	if len(b.buf) >= bufferedTailBytes {
		// A tail that fills its buffer is written to steadily: it keeps
		// the buffer for the next bufferedTailBytes rather than growing
		// one again (that was two bytes allocated per byte appended).
		// Other flushes (a sync, a roll, a checkpoint) let it go.
		full := b.buf
		if err := b.flushLocked(); err != nil {
			return err
		}
		if cap(full) <= 2*bufferedTailBytes {
			b.buf = full[:0]
		}
	}
	return nil
}

// WriteAt writes p to the file at once, after what is held if p is over
// it.
func (b *bufferedFile) WriteAt(p []byte, off int64) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if off < b.end() && off+int64(len(p)) > b.at {
		if err := b.flushLocked(); err != nil {
			return 0, err
		}
	}
	return b.File.WriteAt(p, off)
}

// writeThrough writes p at off to the file at once, after what is held.
func (b *bufferedFile) writeThrough(p []byte, off int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.flushLocked(); err != nil {
		return err
	}
	_, err := b.File.WriteAt(p, off)
	return err
}

// flushLocked writes what is held to the file. The caller holds mu.
func (b *bufferedFile) flushLocked() error {
	if len(b.buf) == 0 {
		return nil
	}
	ioWrites.Add(1)
	if _, err := b.File.WriteAt(b.buf, b.at); err != nil {
		return err
	}
	// Keep a small buffer only: a node has many logs, most of them
	// written to now and then.
	if cap(b.buf) > keptTailBuffer {
		b.buf = nil
	} else {
		b.buf = b.buf[:0]
	}
	return nil
}

// flush writes what is held to the file.
func (b *bufferedFile) flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.flushLocked()
}

// ReadAt reads the file with what is held laid over it.
func (b *bufferedFile) ReadAt(p []byte, off int64) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.File.ReadAt(p, off)
	if len(b.buf) == 0 {
		return n, err
	}
	// The file is as long as what is held makes it: what it lacks before
	// that reads as zeros (a hole), as it would once written.
	if logical := b.end() - off; int64(n) < logical {
		short := min(int(logical), len(p))
		clear(p[n:short])
		n = short
	}
	if lo, hi := max(off, b.at), min(off+int64(len(p)), b.end()); lo < hi {
		copy(p[lo-off:hi-off], b.buf[lo-b.at:hi-b.at])
	}
	if n == len(p) {
		return n, nil
	}
	if err == nil {
		err = io.EOF
	}
	return n, err
}

func (b *bufferedFile) Write(p []byte) (int, error) {
	if err := b.flush(); err != nil {
		return 0, err
	}
	return b.File.Write(p)
}

func (b *bufferedFile) Stat() (fs.FileInfo, error) {
	if err := b.flush(); err != nil {
		return nil, err
	}
	return b.File.Stat()
}

func (b *bufferedFile) Truncate(size int64) error {
	if err := b.flush(); err != nil {
		return err
	}
	return b.File.Truncate(size)
}

func (b *bufferedFile) Sync() error {
	if err := b.flush(); err != nil {
		return err
	}
	return b.File.Sync()
}

func (b *bufferedFile) startSync() func() error {
	if err := b.flush(); err != nil {
		return func() error { return err }
	}
	return startSync(b.File)
}

func (b *bufferedFile) device() uint64 {
	if d, ok := b.File.(deviceFile); ok {
		return d.device()
	}
	return 0
}

func (b *bufferedFile) Close() error {
	err := b.flush()
	if cerr := b.File.Close(); err == nil {
		err = cerr
	}
	return err
}

// openTailFile opens a file that becomes the log's tail: through its
// FileCache, if any, and held in memory while journaled (bufferedFile).
func (l *Log) openTailFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := openLogFile(l.opts, name, flag, os.O_RDWR, perm)
	if err != nil || l.journaled == nil {
		return f, err
	}
	return newBufferedFile(f), nil
}

// flushTail writes what the tail holds in memory to its file (a
// checkpoint of the journal, before it syncs the files).
func (l *Log) flushTail() error {
	l.writeMu.Lock()
	f := l.tail.file
	l.writeMu.Unlock()
	if b, ok := f.(*bufferedFile); ok {
		// A roll or Close since flushed it, and then this finds nothing.
		return b.flush()
	}
	return nil
}
