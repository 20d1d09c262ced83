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

// repairSegmentBytes makes a 20-record log span several files of a few
// records each.
const repairSegmentBytes = 500

// builtLog is a closed log on disk and what it holds.
type builtLog struct {
	dir  string
	recs []Record
	// lastFile is the name of the last file; lastFirst the offset of its
	// first record; lastEnds the end of each of its entries, in bytes.
	lastFile  string
	lastFirst uint64
	lastEnds  []int
}

// buildLog writes n records, one or a few per Append, and closes the log.
func buildLog(t testing.TB, n int) builtLog {
	t.Helper()
	dir := t.TempDir()
	l := openLog(t, dir, Options{Durability: DurabilityNone, SegmentBytes: repairSegmentBytes})
	b := builtLog{dir: dir}
	for i := 0; i < n; {
		batch := []Record{testRecord(i)}
		if i%4 == 1 && i+1 < n {
			batch = append(batch, testRecord(i+1))
		}
		mustAppend(t, l, batch...)
		b.recs = append(b.recs, batch...)
		i += len(batch)
	}
	closeLog(t, l)

	files, err := listSegmentFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	last := files[len(files)-1]
	b.lastFile, b.lastFirst = last.name, last.index-1
	// The expected entry boundaries come from the records, not from the
	// files, so that the test does not trust what it checks.
	end := 0
	for _, r := range b.recs[b.lastFirst:] {
		frame := encodedLen(r)
		end += uvarintLen(uint64(frame)) + frame
		b.lastEnds = append(b.lastEnds, end)
	}
	if data := readFile(t, filepath.Join(dir, last.name)); len(data) != end {
		t.Fatalf("last file is %d bytes, its records take %d", len(data), end)
	}
	return b
}

// survivors returns how many records of the last file lie entirely within
// its first cut bytes, and where the last of them ends.
func (b builtLog) survivors(cut int) (count int, validEnd int) {
	for _, end := range b.lastEnds {
		if end > cut {
			break
		}
		count, validEnd = count+1, end
	}
	return count, validEnd
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
// every record that lies entirely before the cut to survive, and nothing
// else.
func TestRepairCutAtEveryByte(t *testing.T) {
	b := buildLog(t, 20)
	if files, _ := listSegmentFiles(b.dir); len(files) < 3 {
		t.Fatalf("want several files, got %d", len(files))
	}
	last := readFile(t, filepath.Join(b.dir, b.lastFile))
	for cut := 0; cut <= len(last); cut++ {
		dir := b.withLastFile(t, last[:cut])
		count, validEnd := b.survivors(cut)
		torn := 0
		if cut > validEnd {
			torn = 1
		}
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
	b := buildLog(t, 20)
	last := readFile(t, filepath.Join(b.dir, b.lastFile))
	cuts := append([]int{len(last), 0, 1}, b.lastEnds...)
	for _, end := range b.lastEnds {
		cuts = append(cuts, end-1, end-len(last)/7)
	}
	for _, cut := range cuts {
		if cut < 0 || cut > len(last) {
			continue
		}
		for _, zeros := range []int{1, 2, 9, 130, 4096} {
			data := append(bytes.Clone(last[:cut]), make([]byte, zeros)...)
			dir := b.withLastFile(t, data)
			count, validEnd := b.survivors(cut)
			torn := 0
			if cut > validEnd {
				torn = 1 // the torn record; zero fill itself counts as none
			}
			report := expectedReport(filepath.Join(dir, b.lastFile), len(data)-validEnd, torn)
			if torn == 1 {
				report.DroppedRecords = -1 // best effort: a torn prefix may swallow zeros oddly
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
	b := buildLog(t, 20)
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
		count, validEnd := b.survivors(cut)
		report := expectedReport(filepath.Join(dir, b.lastFile), len(data)-validEnd, -1)
		checkRepairedLoose(t, dir, b.recs, b.lastFirst+uint64(count), report)
		if t.Failed() {
			t.Fatalf("round %d: cut at %d, %d bytes of garbage", round, cut, len(garbage))
		}
	}
}

// TestRepairCorruptLastFile flips bits in records of the last file: the
// valid prefix is kept, the damaged record and everything after it go.
func TestRepairCorruptLastFile(t *testing.T) {
	b := buildLog(t, 20)
	last := readFile(t, filepath.Join(b.dir, b.lastFile))
	n := len(b.lastEnds)
	for victim := range n {
		start := 0
		if victim > 0 {
			start = b.lastEnds[victim-1]
		}
		for _, at := range []int{b.lastEnds[victim] - 1, start + 3, start + 7} {
			data := bytes.Clone(last)
			data[at] ^= 0x10
			dir := b.withLastFile(t, data)
			report := expectedReport(filepath.Join(dir, b.lastFile), len(data)-start, n-victim)
			checkRepaired(t, dir, b.recs, b.lastFirst+uint64(victim), report)
			if t.Failed() {
				t.Fatalf("bit flip at byte %d (record %d of the last file)", at, victim)
			}
		}
	}
}

// TestRepairNewRollFile covers a crash right after a roll: the new last
// file is empty, zero-filled, or holds part of its first record.
func TestRepairNewRollFile(t *testing.T) {
	b := buildLog(t, 20)
	next := uint64(len(b.recs))
	newFile := segmentName(next + 1)
	extra := testRecord(int(next))
	entry := appendEntry(nil, EncodeRecord(nil, extra))
	recs := append(b.recs[:next:next], extra)

	tests := []struct {
		name     string
		data     []byte
		keep     uint64
		dropped  int
		recCount int
	}{
		{"empty", nil, next, 0, 0},
		{"zero filled", make([]byte, 4096), next, 4096, 0},
		{"size prefix only", entry[:1], next, 1, 1},
		{"half a record", entry[:len(entry)/2], next, len(entry) / 2, 1},
		{"all but one byte", entry[:len(entry)-1], next, len(entry) - 1, 1},
		{"whole record", entry, next + 1, 0, 0},
		{"whole record then zeros", append(bytes.Clone(entry), make([]byte, 100)...), next + 1, 100, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyDir(t, b.dir)
			writeFile(t, filepath.Join(dir, newFile), tt.data)
			report := expectedReport(filepath.Join(dir, newFile), tt.dropped, tt.recCount)
			checkRepaired(t, dir, recs, tt.keep, report)
		})
	}
}

// TestRepairPicksTidwallTail simulates crashes inside tidwall truncations,
// which leave ".START" or ".END" files that tidwall resolves on open: the
// file repair scans must be the one tidwall will append to.
func TestRepairPicksTidwallTail(t *testing.T) {
	b := buildLog(t, 20)
	files, _ := listSegmentFiles(b.dir)
	middle := files[1] // records [middle.index-1, files[2].index-1)
	middleData := readFile(t, filepath.Join(b.dir, middle.name))
	middleEntries := splitEntries(t, middleData)
	if len(middleEntries) < 2 {
		t.Fatalf("middle file holds %d records", len(middleEntries))
	}
	tornTail := []byte{0x7f, frameVersion, 1, 2}

	t.Run("END", func(t *testing.T) {
		// TruncateBack to the first record of the middle file crashed after
		// writing its END file: tidwall drops the later files and makes the
		// END file the tail. Tear its end as a crash might.
		dir := copyDir(t, b.dir)
		endData := append(bytes.Clone(middleEntries[0]), tornTail...)
		endName := middle.name + endSuffix
		writeFile(t, filepath.Join(dir, endName), endData)
		report := expectedReport(filepath.Join(dir, endName), len(tornTail), 1)
		checkRepaired(t, dir, b.recs, middle.index, report)
	})
	t.Run("START last", func(t *testing.T) {
		// TruncateFront into the last file crashed after writing its START
		// file, which becomes the tail.
		dir := copyDir(t, b.dir)
		lastData := readFile(t, filepath.Join(dir, b.lastFile))
		lastEntries := splitEntries(t, lastData)
		startIndex := b.lastFirst + 2 // tidwall index of the third record
		startName := segmentName(startIndex) + startSuffix
		startData := append(bytes.Join(lastEntries[1:], nil), tornTail...)
		writeFile(t, filepath.Join(dir, startName), startData)

		l := openLog(t, dir, Options{Durability: DurabilityNone, SegmentBytes: repairSegmentBytes})
		defer closeLog(t, l)
		want := expectedReport(filepath.Join(dir, startName), len(tornTail), 1)
		if got := l.Repair(); got != want {
			t.Fatalf("Repair() = %+v, want %+v", got, want)
		}
		checkContents(t, l, b.recs, startIndex-1, uint64(len(b.recs)))
	})
	t.Run("START not last", func(t *testing.T) {
		// TruncateFront into the middle file: the last file stays the tail
		// and is the one to repair.
		dir := copyDir(t, b.dir)
		startIndex := middle.index + 1
		startName := segmentName(startIndex) + startSuffix
		writeFile(t, filepath.Join(dir, startName), bytes.Join(middleEntries[1:], nil))
		lastPath := filepath.Join(dir, b.lastFile)
		writeFile(t, lastPath, append(readFile(t, lastPath), tornTail...))

		l := openLog(t, dir, Options{Durability: DurabilityNone, SegmentBytes: repairSegmentBytes})
		defer closeLog(t, l)
		if got, want := l.Repair(), expectedReport(lastPath, len(tornTail), 1); got != want {
			t.Fatalf("Repair() = %+v, want %+v", got, want)
		}
		checkContents(t, l, b.recs, startIndex-1, uint64(len(b.recs)))
	})
}

// splitEntries splits a tidwall file into its entries (size prefix
// included).
func splitEntries(t testing.TB, data []byte) [][]byte {
	t.Helper()
	var entries [][]byte
	for len(data) > 0 {
		size, n := binary.Uvarint(data)
		if n <= 0 || size > uint64(len(data)-n) {
			t.Fatalf("not a tidwall file")
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

// TestRepairRefusesNewerRecords keeps a well-formed record of an unknown
// version (data of a newer release) instead of cutting it.
func TestRepairRefusesNewerRecords(t *testing.T) {
	b := buildLog(t, 20)
	path := filepath.Join(b.dir, b.lastFile)
	frame := EncodeRecord(nil, testRecord(77))
	frame[0] = 2
	fixCRC(frame)
	before := append(readFile(t, path), appendEntry(nil, frame)...)
	writeFile(t, path, before)
	if _, err := Open(b.dir, Options{}); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("Open over a newer record: %v, want ErrUnsupportedVersion", err)
	}
	if !bytes.Equal(readFile(t, path), before) {
		t.Fatal("Open cut a record of a newer release")
	}
}

// TestCorruptionInOlderFileIsDetected damages files other than the last,
// which Open does not repair: reads must fail with ErrCorrupt, never serve
// the damage, never panic, and records elsewhere stay readable.
func TestCorruptionInOlderFileIsDetected(t *testing.T) {
	b := buildLog(t, 20)
	files, _ := listSegmentFiles(b.dir)
	first := files[0]
	firstData := readFile(t, filepath.Join(b.dir, first.name))
	entries := splitEntries(t, firstData)
	secondStart := files[1].index - 1 // first offset of the second file

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
	checkOthers := func(t *testing.T, l *Log) {
		t.Helper()
		for off := secondStart; off < uint64(len(b.recs)); off++ {
			if got, err := l.Read(off); err != nil || !sameRecord(got, b.recs[off]) {
				t.Fatalf("Read(%d) in an intact file: %v", off, err)
			}
		}
	}

	t.Run("bit flip", func(t *testing.T) {
		data := bytes.Clone(firstData)
		victim := 1
		victimEnd := len(entries[0]) + len(entries[1])
		data[victimEnd-1] ^= 0x01
		l := openDamaged(t, data)
		if _, err := l.Read(uint64(victim)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Read of a damaged record: %v, want ErrCorrupt", err)
		}
		if got, err := l.Read(0); err != nil || !sameRecord(got, b.recs[0]) {
			t.Fatalf("Read(0) next to the damage: %v", err)
		}
		// ReadRange hands out the good prefix, then fails at the damage.
		recs, err := l.ReadRange(0, 10, 0)
		if err != nil || len(recs) != 1 {
			t.Fatalf("ReadRange(0) = %d records, %v; want the 1 before the damage", len(recs), err)
		}
		if _, err := l.ReadRange(1, 10, 0); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("ReadRange at the damage: %v, want ErrCorrupt", err)
		}
		checkOthers(t, l)
	})
	t.Run("size prefix beyond file", func(t *testing.T) {
		data := bytes.Clone(firstData)
		data[len(entries[0])] = 0x7f // the second entry claims 127 bytes
		if len(data)-len(entries[0]) > 0x7f {
			t.Skip("file too long for the test")
		}
		l := openDamaged(t, data)
		for off := range secondStart {
			if _, err := l.Read(off); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Read(%d) in a file tidwall cannot parse: %v, want ErrCorrupt", off, err)
			}
		}
		checkOthers(t, l)
	})
	t.Run("lost records", func(t *testing.T) {
		// The file lost its last record: tidwall's count of the file falls
		// short and it would index past its entries.
		l := openDamaged(t, bytes.Join(entries[:len(entries)-1], nil))
		if _, err := l.Read(secondStart - 1); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Read of a lost record: %v, want ErrCorrupt", err)
		}
		if got, err := l.Read(0); err != nil || !sameRecord(got, b.recs[0]) {
			t.Fatalf("Read(0): %v", err)
		}
		checkOthers(t, l)
	})
}

func TestCountEntries(t *testing.T) {
	frame := EncodeRecord(nil, testRecord(3))
	entry := appendEntry(nil, frame)
	tests := []struct {
		name string
		tail []byte
		want int
	}{
		{"nothing", nil, 0},
		{"zeros", make([]byte, 50), 0},
		{"one torn", entry[:len(entry)-1], 1},
		{"two whole", append(bytes.Clone(entry), entry...), 2},
		{"whole then zeros", append(bytes.Clone(entry), 0, 0, 0), 1},
		{"torn size prefix", []byte{0x80}, 1},
	}
	for _, tt := range tests {
		if got := countEntries(tt.tail); got != tt.want {
			t.Errorf("%s: countEntries = %d, want %d", tt.name, got, tt.want)
		}
	}
}
