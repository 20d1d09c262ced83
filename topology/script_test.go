package topology

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Scenario scripts in testdata/*.txt, in the style of cockroachdb/datadriven:
//
//	# comment
//	split 0
//	----
//	<expected output, up to a blank line>
//
// Each file starts from an empty state; the layout and the set of drained
// segments carry from one command to the next. Regenerate the expected
// output with: go test ./topology/ -run TestScripts -rewrite (and read the
// diff before committing it).
//
// Commands:
//
//	new <segments> <budget>         fixed <partitions> <buckets>
//	split <id> [<at>]               merge <a> <b>
//	rebucket <id> <buckets>         delete <id>
//	drain <id>...                   readable | units | active | maxdepth | json
//	mayread <id>                    ancestors <id>
//	depth <id>                      owner <hash>
//	newfixed <partitions>           plan <op>
//
// Layout-changing commands print the whole layout, after checking Validate.
// plan prints the plan of a change (PlanChange) instead, and moves the
// layout to the one the change makes, so that plans chain; its op is
// written as Op.String prints it:
//
//	split <id> [at <hash>...] [buckets=<n>]   merge <a> <b> [buckets=<n>]
//	rebucket <id> to <buckets>                delete <id>...
//	relocate <id>... to <node>                migrate [buckets=<n>]
//	partitions <total>                        any of them, then @<epoch>

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/*.txt scripts")

type scriptCase struct {
	preamble []string // comments and blank lines before the command
	command  string
	line     int
	expected string
}

func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts in testdata: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			cases := parseScript(t, file)
			var st scriptState
			var out strings.Builder
			for _, c := range cases {
				got := st.run(c.command)
				if *rewrite {
					for _, p := range c.preamble {
						out.WriteString(p + "\n")
					}
					fmt.Fprintf(&out, "%s\n----\n%s\n\n", c.command, got)
					continue
				}
				if got != c.expected {
					t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", file, c.line, c.command, got, c.expected)
				}
			}
			if *rewrite {
				if err := os.WriteFile(file, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func parseScript(t *testing.T, file string) []scriptCase {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	var cases []scriptCase
	var preamble []string
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			preamble = append(preamble, line)
			continue
		}
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: command %q is not followed by ----", file, i+1, line)
		}
		c := scriptCase{preamble: preamble, command: line, line: i + 1}
		preamble = nil
		i += 2
		var expected []string
		for ; i < len(lines) && lines[i] != ""; i++ {
			expected = append(expected, lines[i])
		}
		c.expected = strings.Join(expected, "\n")
		cases = append(cases, c)
	}
	return cases
}

type scriptState struct {
	layout  Layout
	drained map[SegmentID]bool
}

func (st *scriptState) isDrained(id SegmentID) bool { return st.drained[id] }

func (st *scriptState) run(command string) string {
	fields := strings.Fields(command)
	if fields[0] == "plan" {
		return st.plan(fields[1:])
	}
	args := make([]uint64, 0, len(fields)-1)
	for _, f := range fields[1:] {
		v, err := ParseHash(f)
		if err != nil {
			return "bad argument: " + err.Error()
		}
		args = append(args, v)
	}
	arg := func(i int) uint64 {
		if i < len(args) {
			return args[i]
		}
		return 0
	}
	id := SegmentID(arg(0))

	var next Layout
	var err error
	switch fields[0] {
	case "new":
		next, err = New(int(arg(0)), int(arg(1)))
	case "fixed":
		next, err = FromFixed(int(arg(0)), int(arg(1)))
	case "newfixed":
		next, err = NewFixed(int(arg(0)))
	case "split":
		var at *uint64
		if len(args) > 1 {
			at = &args[1]
		}
		next, err = st.layout.Split(id, at)
	case "merge":
		next, err = st.layout.Merge(id, SegmentID(arg(1)))
	case "rebucket":
		next, err = st.layout.Rebucket(id, int(arg(1)))
	case "delete":
		next, err = st.layout.Delete(id)
	case "drain":
		if st.drained == nil {
			st.drained = make(map[SegmentID]bool)
		}
		for _, a := range args {
			st.drained[SegmentID(a)] = true
		}
		return fmt.Sprintf("readable: %v", Readable(st.layout, st.isDrained))
	case "readable":
		return fmt.Sprintf("readable: %v", Readable(st.layout, st.isDrained))
	case "units":
		var b strings.Builder
		b.WriteString("units:")
		for _, u := range ReadableUnits(st.layout, st.isDrained) {
			fmt.Fprintf(&b, " %d/%d", u.Segment, u.Bucket)
		}
		return b.String()
	case "mayread":
		return strconv.FormatBool(MayRead(st.layout, id, st.isDrained))
	case "ancestors":
		return fmt.Sprintf("ancestors: %v", st.layout.Ancestors(id))
	case "depth":
		d, ok := st.layout.Depth(id)
		return fmt.Sprintf("depth %d %v", d, ok)
	case "maxdepth":
		return fmt.Sprintf("max depth %d", st.layout.MaxDepth())
	case "owner":
		s, ok := st.layout.Owner(arg(0))
		if !ok {
			return "no owner"
		}
		return fmt.Sprintf("owner %d %s", s.ID, s.Range)
	case "active":
		var b strings.Builder
		for i, s := range st.layout.Active() {
			if i > 0 {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "%d %s buckets=%d", s.ID, s.Range, s.Buckets)
		}
		return b.String()
	case "json":
		data, err := st.layout.MarshalJSON()
		if err != nil {
			return "error: " + err.Error()
		}
		return string(data)
	default:
		return "unknown command " + fields[0]
	}
	if err != nil {
		return "error: " + err.Error()
	}
	st.layout = next
	return formatLayout(next)
}

// plan runs the plan command.
func (st *scriptState) plan(fields []string) string {
	op, err := parseOp(fields)
	if err != nil {
		return "bad op: " + err.Error()
	}
	p, err := PlanChange(st.layout, op)
	if err != nil {
		return "error: " + err.Error()
	}
	if err := p.Next.Validate(); err != nil {
		return "INVALID next layout: " + err.Error()
	}
	st.layout = p.Next
	return p.String()
}

// parseOp reads an Op written as Op.String prints it.
func parseOp(fields []string) (Op, error) {
	if len(fields) == 0 {
		return Op{}, fmt.Errorf("no operation")
	}
	op := Op{Kind: OpKind(fields[0])}
	rest := fields[1:]
	number := func(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) }
	for i := 0; i < len(rest); i++ {
		f := rest[i]
		switch {
		case f == "at":
			for i+1 < len(rest) && strings.HasPrefix(rest[i+1], "0x") {
				h, err := ParseHash(rest[i+1])
				if err != nil {
					return Op{}, err
				}
				op.At = append(op.At, h)
				i++
			}
		case f == "to" && i+1 < len(rest):
			i++
			if op.Kind == OpRebucket {
				n, err := number(rest[i])
				if err != nil {
					return Op{}, err
				}
				op.Buckets = int(n)
			} else {
				op.Owner = rest[i]
			}
		case strings.HasPrefix(f, "buckets="):
			n, err := number(strings.TrimPrefix(f, "buckets="))
			if err != nil {
				return Op{}, err
			}
			op.Buckets = int(n)
		case strings.HasPrefix(f, "@"):
			n, err := number(f[1:])
			if err != nil {
				return Op{}, err
			}
			op.Epoch = n
		case op.Kind == OpPartitions:
			n, err := number(f)
			if err != nil {
				return Op{}, err
			}
			op.Partitions = int(n)
		default:
			n, err := number(f)
			if err != nil {
				return Op{}, fmt.Errorf("%q is not a segment id", f)
			}
			op.Segments = append(op.Segments, SegmentID(n))
		}
	}
	return op, nil
}

// formatLayout prints one line per segment, after the epoch and next id.
func formatLayout(l Layout) string {
	var b strings.Builder
	fmt.Fprintf(&b, "epoch=%d next=%d", l.Epoch, l.NextID)
	if err := l.Validate(); err != nil {
		fmt.Fprintf(&b, " INVALID: %v", err)
	}
	for _, s := range l.Segments {
		sealed := ""
		if s.State != StateActive {
			sealed = strconv.FormatUint(s.SealedEpoch, 10)
		}
		fmt.Fprintf(&b, "\n%d %s %s buckets=%d epochs=%d..%s parents=%v children=%v",
			s.ID, s.State, s.Range, s.Buckets, s.CreatedEpoch, sealed, nonNil(s.Parents), nonNil(s.Children))
		if s.Partition >= 0 {
			fmt.Fprintf(&b, " partition=%d", s.Partition)
		}
	}
	return b.String()
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
