package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// repairSegmentBytes makes a 40-record log span several files of a few
// batches each.
const repairSegmentBytes = 900

// builtLog is a closed log on disk and what it holds.
type builtLog struct {
	dir  string
	recs []Record
	// lastFile is the name of the last file; lastFirst the offset of its
	// first record; lastBatches its frames, as the appends made them.
	lastFile    string
	lastFirst   uint64
	lastBatches []builtBatch
}

// builtBatch is one frame of the last file.
type builtBatch struct {
	first  uint64 // offset of its first record
	count  int
	start  int // where its entry starts in the file
	header int // where its frame header ends: a cut at or after it leaves the record count
	end    int // where its entry ends
}

// buildLog writes n records in batches of 1, 2, 3, 1, ... and closes the
// log.
func buildLog(t testing.TB, n int) builtLog {
	t.Helper()
	dir := t.TempDir()
	l := openLog(t, dir, Options{Durability: DurabilityNone, SegmentBytes: repairSegmentBytes})
	b := builtLog{dir: dir}
	var batches [][]Record
	for i := 0; i < n; {
		size := min(1+len(batches)%3, n-i)
		batch := make([]Record, size)
		for j := range batch {
			batch[j] = testRecord(i + j)
		}
		mustAppend(t, l, batch...)
		batches = append(batches, batch)
		b.recs = append(b.recs, batch...)
		i += size
	}
	closeLog(t, l)

	files, err := listSegmentFiles(OSFS, dir)
	if err != nil {
		t.Fatal(err)
	}
	last := files[len(files)-1]
	b.lastFile, b.lastFirst = last.name, last.first
	// The expected frame boundaries come from the records, not from the
	// files, so that the test does not trust what it checks.
	off, pos := uint64(0), 0
	for _, batch := range batches {
		if off >= b.lastFirst {
			entry := batchEntryLen(batch)
			frameLen := entry - uvarintLen(uint64(entry))
			prefix := uvarintLen(uint64(frameLen))
			b.lastBatches = append(b.lastBatches, builtBatch{
				first: off, count: len(batch), start: pos, header: pos + prefix + batchHeaderLen, end: pos + entry,
			})
			pos += entry
		}
		off += uint64(len(batch))
	}
	if len(b.lastBatches) == 0 || b.lastBatches[0].first != b.lastFirst {
		t.Fatalf("the last file does not start at a batch")
	}
	if data := readFile(t, filepath.Join(dir, last.name)); len(data) != pos {
		t.Fatalf("last file is %d bytes, its records take %d", len(data), pos)
	}
	return b
}

// survivors returns how many records of the last file lie in batches that
// are entirely within its first cut bytes, where the last of them ends, and
// the records Open should report dropped with the batch cut by cut (its
// header's count if the cut leaves its header, else 1; 0 if no batch is cut).
func (b builtLog) survivors(cut int) (count int, validEnd int, torn int) {
	for _, batch := range b.lastBatches {
		if batch.end > cut {
			if cut > batch.start {
				torn = 1
				if cut >= batch.header {
					torn = batch.count
				}
			}
			break
		}
		count, validEnd = count+batch.count, batch.end
	}
	return count, validEnd, torn
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}
}

// copyDir copies the files of src into a new temporary directory.
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		out.Close()
	}
	return dst
}

// withLastFile copies the built log and replaces the contents of its last
// file.
func (b builtLog) withLastFile(t testing.TB, data []byte) string {
	t.Helper()
	dir := copyDir(t, b.dir)
	writeFile(t, filepath.Join(dir, b.lastFile), data)
	return dir
}

// checkRepaired opens dir, expects the first next records of recs to be
// exactly what survives and report to be what Open says it cut, then
// appends one record and checks it survives a reopen.
func checkRepaired(t testing.TB, dir string, recs []Record, next uint64, report RepairReport) {
	t.Helper()
	opts := Options{Durability: DurabilityNone, SegmentBytes: repairSegmentBytes}
	l := openLog(t, dir, opts)
	if got := l.Repair(); got != report {
		t.Fatalf("Repair() = %+v, want %+v", got, report)
	}
	want := append(recs[:next:next], testRecord(9999))
	checkContents(t, l, want, 0, next)
	if got := mustAppend(t, l, want[next]); got != next {
		t.Fatalf("append after repair at %d, want %d", got, next)
	}
	closeLog(t, l)

	l = openLog(t, dir, opts)
	defer closeLog(t, l)
	if got := l.Repair(); got != (RepairReport{}) {
		t.Fatalf("second open repaired again: %+v", got)
	}
	checkContents(t, l, want, 0, next+1)
}

func expectedReport(path string, dropped int, records int) RepairReport {
	if dropped == 0 {
		return RepairReport{}
	}
	return RepairReport{DroppedBytes: int64(dropped), DroppedRecords: records, File: path}
}

// TestRepairCutAtEveryByte cuts the last file at every length and expects
// every batch that lies entirely before the cut to survive with all its
// records, and nothing else.
func TestRepairCutAtEveryByte(t *testing.T) {
	b := buildLog(t, 40)
	if files, _ := listSegmentFiles(OSFS, b.dir); len(files) < 3 {
		t.Fatalf("want several files, got %d", len(files))
	}
	if len(b.lastBatches) < 3 {
		t.Fatalf("want several batches in the last file, got %d", len(b.lastBatches))
	}
	last := readFile(t, filepath.Join(b.dir, b.lastFile))
	for cut := 0; cut <= len(last); cut++ {
		dir := b.withLastFile(t, last[:cut])
		count, validEnd, torn := b.survivors(cut)
		report := expectedReport(filepath.Join(dir, b.lastFile), cut-validEnd, torn)
		checkRepaired(t, dir, b.recs, b.lastFirst+uint64(count), report)
		if t.Failed() {
			t.Fatalf("cut at byte %d of %d", cut, len(last))
		}
	}
}

// TestRepairZeroFill appends zeros (a crash after the file size grew but
// before the data reached the disk) to intact and torn last files.
func TestRepairZeroFill(t *testing.T) {
	b := buildLog(t, 40)
	last := readFile(t, filepath.Join(b.dir, b.lastFile))
	cuts := []int{len(last), 0, 1}
	for _, batch := range b.lastBatches {
		cuts = append(cuts, batch.end, batch.end-1, batch.header, batch.header-1, batch.end-len(last)/7)
	}
	for _, cut := range cuts {
		if cut < 0 || cut > len(last) {
			continue
		}
		for _, zeros := range []int{1, 2, 9, 130, 4096} {
			data := append(bytes.Clone(last[:cut]), make([]byte, zeros)...)
			dir := b.withLastFile(t, data)
			count, validEnd, torn := b.survivors(cut)
			report := expectedReport(filepath.Join(dir, b.lastFile), len(data)-validEnd, torn)
			if torn > 0 {
				report.DroppedRecords = -1 // best effort: a torn prefix may swallow zeros oddly
			} else {
				// Nothing but zeros cut: no record lost.
				report = RepairReport{ZeroBytes: int64(len(data) - validEnd), File: filepath.Join(dir, b.lastFile)}
			}
			checkRepairedLoose(t, dir, b.recs, b.lastFirst+uint64(count), report)
			if t.Failed() {
				t.Fatalf("cut at %d, %d zeros", cut, zeros)
			}
		}
	}
}

// checkRepairedLoose is checkRepaired with DroppedRecords unchecked when
// report.DroppedRecords is -1.
func checkRepairedLoose(t testing.TB, dir string, recs []Record, next uint64, report RepairReport) {
	t.Helper()
	if report.DroppedRecords == -1 {
		l := openLog(t, dir, Options{Durability: DurabilityNone, SegmentBytes: repairSegmentBytes})
		report.DroppedRecords = l.Repair().DroppedRecords
		if report.DroppedRecords < 1 {
			t.Errorf("a torn record was dropped but DroppedRecords = %d", report.DroppedRecords)
		}
		closeLog(t, l)
		// The open above repaired the file; what it cut is now a clean file.
		checkRepaired(t, dir, recs, next, RepairReport{})
		return
	}
	checkRepaired(t, dir, recs, next, report)
}

// TestRepairGarbageTail appends random bytes to intact and torn last files.
func TestRepairGarbageTail(t *testing.T) {
	b := buildLog(t, 40)
	last := readFile(t, filepath.Join(b.dir, b.lastFile))
	rng := rand.New(rand.NewPCG(7, 11))
	for round := range 60 {
		cut := len(last)
		if round%2 == 1 {
			cut = rng.IntN(len(last) + 1)
		}
		garbage := make([]byte, 1+rng.IntN([]int{4, 40, 400, 5000}[round%4]))
		for i := range garbage {
			garbage[i] = byte(rng.Uint32())
		}
		data := append(bytes.Clone(last[:cut]), garbage...)
		dir := b.withLastFile(t, data)
		count, validEnd, _ := b.survivors(cut)
		report := expectedReport(filepath.Join(dir, b.lastFile), len(data)-validEnd, -1)
		checkRepairedLoose(t, dir, b.recs, b.lastFirst+uint64(count), report)
		if t.Failed() {
			t.Fatalf("round %d: cut at %d, %d bytes of garbage", round, cut, len(garbage))
		}
	}
}

// TestRepairCorruptLastFile flips bits in the last frame of the last file,
// which no whole frame follows: it is cut, as a torn write would be. (A
// damaged frame with whole frames after it is a hole: holes_test.go.)
func TestRepairCorruptLastFile(t *testing.T) {
	b := buildLog(t, 40)
	last := readFile(t, filepath.Join(b.dir, b.lastFile))
	batch := b.lastBatches[len(b.lastBatches)-1]
	// A flip in the CRC, in the first offset and in the last record.
	for _, at := range []int{batch.start + 3, batch.start + 7, batch.end - 1} {
		data := bytes.Clone(last)
		data[at] ^= 0x10
		dir := b.withLastFile(t, data)
		report := expectedReport(filepath.Join(dir, b.lastFile), len(data)-batch.start, batch.count)
		checkRepaired(t, dir, b.recs, batch.first, report)
		if t.Failed() {
			t.Fatalf("bit flip at byte %d of the last frame", at)
		}
	}
}

// TestRepairRewrittenFrameOutOfSequence: a last frame whose CRC is good but
// whose first offset goes back is not part of the valid prefix.
func TestRepairRewrittenFrameOutOfSequence(t *testing.T) {
	b := buildLog(t, 40)
	last := readFile(t, filepath.Join(b.dir, b.lastFile))
	victim := b.lastBatches[len(b.lastBatches)-1]
	data := bytes.Clone(last)
	frame := data[victim.header-batchHeaderLen : victim.end]
	binary.LittleEndian.PutUint64(frame[5:13], victim.first-1)
	fixCRC(frame)
	dir := b.withLastFile(t, data)
	report := expectedReport(filepath.Join(dir, b.lastFile), victim.end-victim.start, victim.count)
	checkRepaired(t, dir, b.recs, victim.first, report)
}

// TestRepairNewRollFile covers a crash right after a roll: the new last
// file is empty, zero-filled, or holds part of its first batch.
func TestRepairNewRollFile(t *testing.T) {
	b := buildLog(t, 40)
	next := uint64(len(b.recs))
	newFile := segmentName(next)
	extra := []Record{testRecord(int(next)), testRecord(int(next) + 1)}
	entry := appendRecordsEntry(nil, next, extra)
	_, prefix := binary.Uvarint(entry)
	headerEnd := prefix + batchHeaderLen
	recs := append(b.recs[:next:next], extra...)

	tests := []struct {
		name     string
		data     []byte
		keep     uint64
		dropped  int
		recCount int
		zeros    int
	}{
		{"empty", nil, next, 0, 0, 0},
		{"zero filled", make([]byte, 4096), next, 0, 0, 4096},
		{"size prefix only", entry[:1], next, 1, 1, 0},
		{"header cut", entry[:headerEnd-1], next, headerEnd - 1, 1, 0},
		{"header only", entry[:headerEnd], next, headerEnd, 2, 0},
		{"half a batch", entry[:len(entry)/2], next, len(entry) / 2, 2, 0},
		{"all but one byte", entry[:len(entry)-1], next, len(entry) - 1, 2, 0},
		{"whole batch", entry, next + 2, 0, 0, 0},
		{"whole batch then zeros", append(bytes.Clone(entry), make([]byte, 100)...), next + 2, 0, 0, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyDir(t, b.dir)
			writeFile(t, filepath.Join(dir, newFile), tt.data)
			report := expectedReport(filepath.Join(dir, newFile), tt.dropped, tt.recCount)
			if tt.zeros > 0 {
				report = RepairReport{ZeroBytes: int64(tt.zeros), File: filepath.Join(dir, newFile)}
			}
			checkRepaired(t, dir, recs, tt.keep, report)
		})
	}
}

// TestRepairFinishesTruncation simulates crashes inside truncations, which
// leave ".START" or ".END" files that Open puts in place: the file repair
// scans must be the one the log then appends to.
func TestRepairFinishesTruncation(t *testing.T) {
	b := buildLog(t, 40)
	files, _ := listSegmentFiles(OSFS, b.dir)
	middle, afterMiddle := files[1], files[2].first // records [middle.first, afterMiddle)
	middleData := readFile(t, filepath.Join(b.dir, middle.name))
	middleEntries := splitEntries(t, middleData)
	if len(middleEntries) < 2 {
		t.Fatalf("middle file holds %d batches", len(middleEntries))
	}
	firstBatch := entryRecords(t, middleEntries[0])
	if firstBatch < 2 {
		t.Fatalf("the middle file's first batch holds %d records, want several", firstBatch)
	}
	tornTail := []byte{0x7f, batchVersion, 1, 2}

	t.Run("END", func(t *testing.T) {
		// TruncateTail to the second batch of the middle file crashed
		// after writing its END file: Open drops the later files and makes
		// the END file the tail. Tear its end as a crash might.
		dir := copyDir(t, b.dir)
		endData := append(bytes.Clone(middleEntries[0]), tornTail...)
		endName := middle.name + endSuffix
		writeFile(t, filepath.Join(dir, endName), endData)
		report := expectedReport(filepath.Join(dir, middle.name), len(tornTail), 1)
		checkRepaired(t, dir, b.recs, middle.first+uint64(firstBatch), report)
	})
	t.Run("END inside a batch", func(t *testing.T) {
		// TruncateTail into the middle of the middle file's first batch.
		dir := copyDir(t, b.dir)
		from := middle.first + 1
		end := appendRecordsEntry(nil, middle.first, b.recs[middle.first:from])
		writeFile(t, filepath.Join(dir, middle.name+endSuffix), end)
		checkRepaired(t, dir, b.recs, from, RepairReport{})
	})
	t.Run("START last", func(t *testing.T) {
		// TruncateHead into the last file crashed after writing its START
		// file, which becomes the tail.
		dir := copyDir(t, b.dir)
		lastData := readFile(t, filepath.Join(dir, b.lastFile))
		lastEntries := splitEntries(t, lastData)
		before := b.lastBatches[1].first
		startName := segmentName(before) + startSuffix
		startData := append(bytes.Join(lastEntries[1:], nil), tornTail...)
		writeFile(t, filepath.Join(dir, startName), startData)

		l := openLog(t, dir, Options{Durability: DurabilityNone, SegmentBytes: repairSegmentBytes})
		defer closeLog(t, l)
		want := expectedReport(filepath.Join(dir, segmentName(before)), len(tornTail), 1)
		if got := l.Repair(); got != want {
			t.Fatalf("Repair() = %+v, want %+v", got, want)
		}
		checkContents(t, l, b.recs, before, uint64(len(b.recs)))
	})
	t.Run("START not last", func(t *testing.T) {
		// TruncateHead into a batch of the middle file: the START file
		// re-frames the rest of that batch; the last file stays the tail and
		// is the one to repair.
		dir := copyDir(t, b.dir)
		before := middle.first + 1
		startData := appendRecordsEntry(nil, before, b.recs[before:middle.first+uint64(firstBatch)])
		startData = append(startData, bytes.Join(middleEntries[1:], nil)...)
		writeFile(t, filepath.Join(dir, segmentName(before)+startSuffix), startData)
		lastPath := filepath.Join(dir, b.lastFile)
		writeFile(t, lastPath, append(readFile(t, lastPath), tornTail...))

		l := openLog(t, dir, Options{Durability: DurabilityNone, SegmentBytes: repairSegmentBytes})
		defer closeLog(t, l)
		if got, want := l.Repair(), expectedReport(lastPath, len(tornTail), 1); got != want {
			t.Fatalf("Repair() = %+v, want %+v", got, want)
		}
		checkContents(t, l, b.recs, before, uint64(len(b.recs)))
		if _, err := os.Stat(filepath.Join(dir, middle.name)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the file the START file replaces survived: %v", err)
		}
		if afterMiddle <= before {
			t.Fatal("bad test setup")
		}
	})
	t.Run("both", func(t *testing.T) {
		dir := copyDir(t, b.dir)
		writeFile(t, filepath.Join(dir, middle.name+endSuffix), middleEntries[0])
		writeFile(t, filepath.Join(dir, segmentName(middle.first+1)+startSuffix), nil)
		if _, err := Open(dir, Options{}); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Open with both a START and an END file: %v, want ErrCorrupt", err)
		}
	})
}

// appendRecordsEntry appends the entry of one frame holding recs at offsets
// from first.
func appendRecordsEntry(dst []byte, first uint64, recs []Record) []byte {
	var bodies [][]byte
	for _, r := range recs {
		bodies = append(bodies, EncodeRecord(nil, r)[frameHeaderLen:])
	}
	return appendBatchEntry(dst, plainFrame, first, bodies)
}

// entryRecords returns the record count of a stored entry.
func entryRecords(t testing.TB, entry []byte) int {
	t.Helper()
	b, err := entryBatch(entry)
	if err != nil {
		t.Fatal(err)
	}
	return b.count()
}

// splitEntries splits a log file into its entries (size prefix
// included).
func splitEntries(t testing.TB, data []byte) [][]byte {
	t.Helper()
	var entries [][]byte
	for len(data) > 0 {
		size, n := binary.Uvarint(data)
		if n <= 0 || size > uint64(len(data)-n) {
			t.Fatalf("not a log file")
		}
		entries = append(entries, data[:n+int(size)])
		data = data[n+int(size):]
	}
	return entries
}

func appendEntry(dst, frame []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(frame)))
	return append(dst, frame...)
}

// TestRepairRefusesNewerRecords keeps a well-formed frame of an unknown
// version (data of a newer release) instead of cutting it.
func TestRepairRefusesNewerRecords(t *testing.T) {
	b := buildLog(t, 40)
	path := filepath.Join(b.dir, b.lastFile)
	entry := appendRecordsEntry(nil, uint64(len(b.recs)), []Record{testRecord(77)})
	_, n := binary.Uvarint(entry)
	entry[n] = 4
	fixCRC(entry[n:])
	before := append(readFile(t, path), entry...)
	writeFile(t, path, before)
	if _, err := Open(b.dir, Options{}); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("Open over a newer frame: %v, want ErrUnsupportedVersion", err)
	}
	if !bytes.Equal(readFile(t, path), before) {
		t.Fatal("Open cut a frame of a newer release")
	}
}

// TestOpenRefusesPerRecordLogs: a log of the one-record-per-entry format of
// earlier releases (version 1 record frames, files named from 1) is refused
// with ErrUnsupportedVersion and left as it is, whether its last file holds
// records or not.
func TestOpenRefusesPerRecordLogs(t *testing.T) {
	var first []byte
	for i := range 5 {
		first = appendEntry(first, EncodeRecord(nil, testRecord(i)))
	}
	for _, tail := range [][]byte{appendEntry(nil, EncodeRecord(nil, testRecord(5))), nil} {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, segmentName(1)), first)
		writeFile(t, filepath.Join(dir, segmentName(6)), tail)
		_, err := Open(dir, Options{})
		if !errors.Is(err, ErrUnsupportedVersion) || errors.Is(err, ErrCorrupt) {
			t.Fatalf("Open of a per-record log: %v, want ErrUnsupportedVersion", err)
		}
		if !bytes.Equal(readFile(t, filepath.Join(dir, segmentName(1))), first) ||
			!bytes.Equal(readFile(t, filepath.Join(dir, segmentName(6))), tail) {
			t.Fatal("Open changed a per-record log")
		}
	}
}

// TestCorruptionInOlderFileIsDetected damages files other than the last,
// which Open does not repair: reads must fail with ErrCorrupt, never serve
// the damage, never panic, and records elsewhere stay readable.
func TestCorruptionInOlderFileIsDetected(t *testing.T) {
	b := buildLog(t, 40)
	files, _ := listSegmentFiles(OSFS, b.dir)
	first := files[0]
	firstData := readFile(t, filepath.Join(b.dir, first.name))
	entries := splitEntries(t, firstData)
	if len(entries) < 3 {
		t.Fatalf("first file holds %d batches", len(entries))
	}
	batch0 := uint64(entryRecords(t, entries[0])) // offsets [0, batch0) are in the first batch
	secondStart := files[1].first                 // first offset of the second file

	openDamaged := func(t *testing.T, data []byte) *Log {
		dir := copyDir(t, b.dir)
		writeFile(t, filepath.Join(dir, first.name), data)
		l := openLog(t, dir, Options{Durability: DurabilityNone, SegmentBytes: repairSegmentBytes})
		if l.Repair() != (RepairReport{}) {
			t.Fatalf("Open repaired an older file: %+v", l.Repair())
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	checkRange := func(t *testing.T, l *Log, from, to uint64) {
		t.Helper()
		for off := from; off < to; off++ {
			if got, err := l.Read(off); err != nil || !sameRecord(got, b.recs[off]) {
				t.Fatalf("Read(%d) in an intact batch: %v", off, err)
			}
		}
	}
	checkCorrupt := func(t *testing.T, l *Log, from, to uint64) {
		t.Helper()
		for off := from; off < to; off++ {
			_, err := l.Read(off)
			var hole *HoleError
			if !errors.As(err, &hole) || !errors.Is(err, ErrHole) || hole.From != from || hole.To != to {
				t.Fatalf("Read(%d) of a damaged record: %v, want the hole [%d, %d)", off, err, from, to)
			}
		}
		if holes := l.Holes(); len(holes) != 1 || holes[0].From != from || holes[0].To != to {
			t.Fatalf("Holes() = %+v, want [%d, %d)", holes, from, to)
		}
	}

	t.Run("bit flip", func(t *testing.T) {
		data := bytes.Clone(firstData)
		victimEnd := len(entries[0]) + len(entries[1])
		data[victimEnd-1] ^= 0x01
		batch1 := batch0 + uint64(entryRecords(t, entries[1]))
		l := openDamaged(t, data)
		checkCorrupt(t, l, batch0, batch1)
		checkRange(t, l, 0, batch0)
		checkRange(t, l, batch1, uint64(len(b.recs)))
		// ReadRange hands out the good prefix, then fails at the damage.
		recs, err := l.ReadRange(0, 100, 0)
		if err != nil || uint64(len(recs)) != batch0 {
			t.Fatalf("ReadRange(0) = %d records, %v; want the %d before the damage", len(recs), err, batch0)
		}
		if _, err := l.ReadRange(batch0, 10, 0); !errors.Is(err, ErrHole) {
			t.Fatalf("ReadRange at the damage: %v, want ErrHole", err)
		}
		if recs, err := l.ReadRange(batch1, 10, 0); err != nil || len(recs) == 0 || !sameRecord(recs[0], b.recs[batch1]) {
			t.Fatalf("ReadRange after the damage: %d records, %v", len(recs), err)
		}
	})
	t.Run("size prefix beyond file", func(t *testing.T) {
		data := bytes.Clone(firstData)
		data[len(entries[0])] = 0x7f // the second entry claims 127 bytes
		batch1 := batch0 + uint64(entryRecords(t, entries[1]))
		l := openDamaged(t, data)
		checkRange(t, l, 0, batch0)
		checkCorrupt(t, l, batch0, batch1)
		checkRange(t, l, batch1, uint64(len(b.recs)))
	})
	t.Run("lost batch", func(t *testing.T) {
		// The file lost its last batch: its frames end before the next
		// file starts.
		lostFrom := secondStart - uint64(entryRecords(t, entries[len(entries)-1]))
		l := openDamaged(t, bytes.Join(entries[:len(entries)-1], nil))
		checkRange(t, l, 0, lostFrom)
		checkCorrupt(t, l, lostFrom, secondStart)
		checkRange(t, l, secondStart, uint64(len(b.recs)))
	})
	t.Run("garbage", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		for round := range 50 {
			data := bytes.Clone(firstData)
			for range 1 + round%5 {
				data[rng.IntN(len(data))] = byte(rng.Uint32())
			}
			l := openDamaged(t, data)
			for off := range secondStart {
				got, err := l.Read(off)
				if err == nil && !sameRecord(got, b.recs[off]) {
					t.Fatalf("round %d: Read(%d) served damaged data", round, off)
				}
				if err != nil && !errors.Is(err, ErrHole) && !errors.Is(err, ErrUnsupportedVersion) {
					t.Fatalf("round %d: Read(%d): %v", round, off, err)
				}
			}
			checkRange(t, l, secondStart, uint64(len(b.recs)))
			l.Close()
		}
	})
}

func TestCountDropped(t *testing.T) {
	entry := appendRecordsEntry(nil, 5, []Record{testRecord(3), testRecord(4), testRecord(5)})
	single := appendRecordsEntry(nil, 5, []Record{testRecord(3)})
	tests := []struct {
		name string
		tail []byte
		want int
	}{
		{"nothing", nil, 0},
		{"zeros", make([]byte, 50), 0},
		{"one torn", entry[:len(entry)-1], 3},
		{"header cut", entry[:10], 1},
		{"two whole", append(bytes.Clone(entry), single...), 4},
		{"whole then zeros", append(bytes.Clone(entry), 0, 0, 0), 3},
		{"torn size prefix", []byte{0x80}, 1},
		{"implausible count", append([]byte{30, batchVersion}, make([]byte, 29)...), 1},
	}
	binary.LittleEndian.PutUint32(tests[len(tests)-1].tail[1+13:], 1000)
	for _, tt := range tests {
		if got := countDropped(tt.tail); got != tt.want {
			t.Errorf("%s: countDropped = %d, want %d", tt.name, got, tt.want)
		}
	}
}
