package topology

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func goldenLayouts(t testing.TB) map[string]Layout {
	split := mustNew(t, 2, 8)
	split = must(t)(split.Split(0, nil))
	split = must(t)(split.Split(1, ptr(0xc000000000000000)))
	split = must(t)(split.Merge(3, 4))
	split = must(t)(split.Delete(0))
	fixed := must(t)(FromFixed(2, 1))
	fixed = must(t)(fixed.Rebucket(3, 4))
	return map[string]Layout{"layout_split.json": split, "layout_fixed.json": fixed}
}

// TestJSONGolden pins the wire form: testdata/layout_*.json hold the
// indented encoding; -rewrite regenerates them.
func TestJSONGolden(t *testing.T) {
	for name, l := range goldenLayouts(t) {
		data, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		var indented bytes.Buffer
		if err := json.Indent(&indented, data, "", "  "); err != nil {
			t.Fatal(err)
		}
		indented.WriteByte('\n')
		path := filepath.Join("testdata", name)
		if *rewrite {
			if err := os.WriteFile(path, indented.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(indented.Bytes(), want) {
			t.Errorf("%s: encoding changed:\n%s", name, indented.Bytes())
		}
		var back Layout
		if err := json.Unmarshal(want, &back); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(back, l) {
			t.Errorf("%s: decoded\n%s\nwant\n%s", name, formatLayout(back), formatLayout(l))
		}
	}
}

func TestJSONSegmentForm(t *testing.T) {
	t.Parallel()
	l := goldenLayouts(t)["layout_split.json"]
	data, err := json.Marshal(l.Segments[1])
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":1,"state":"sealed","range":["0x8000000000000000","0xffffffffffffffff"],"parents":[],"children":[4,5],"buckets":4,"created_epoch":1,"sealed_epoch":3}`
	if string(data) != want {
		t.Errorf("segment encodes as\n%s\nwant\n%s", data, want)
	}
	odd, err := json.Marshal(Segment{State: "a\x00\"b", Partition: -1})
	if err != nil || !json.Valid(odd) {
		t.Errorf("an unknown state encodes as %s, %v", odd, err)
	}
	empty, _ := json.Marshal(Layout{})
	if string(empty) != `{"epoch":0,"next_id":0,"segments":[]}` {
		t.Errorf("empty layout encodes as %s", empty)
	}
	// A layout inside another message (as topic.describe returns it) goes
	// through the same methods.
	reply := struct {
		Topic  string `json:"topic"`
		Layout Layout `json:"layout"`
	}{"topic://acme/orders/payments", l}
	data, _ = json.Marshal(reply)
	reply.Layout = Layout{}
	if err := json.Unmarshal(data, &reply); err != nil || !reflect.DeepEqual(reply.Layout, l) {
		t.Errorf("embedded round trip: %v", err)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	t.Parallel()
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 3))
		l := randomLayout(t, rng, 100)
		data, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		var back Layout
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if !reflect.DeepEqual(back, l) {
			t.Fatalf("seed %d: round trip changed the layout", seed)
		}
	}
}

func TestJSONDecodeErrors(t *testing.T) {
	t.Parallel()
	const seg0 = `{"id":0,"state":"active","range":["0x0000000000000000","0xffffffffffffffff"],"parents":[],"children":[],"buckets":1,"created_epoch":1,"sealed_epoch":0`
	layout := func(segments string) string { return `{"epoch":1,"next_id":1,"segments":[` + segments + `]}` }
	good := layout(seg0 + `}`)
	var l Layout
	if err := json.Unmarshal([]byte(good), &l); err != nil {
		t.Fatalf("good layout refused: %v", err)
	}
	// Unknown fields are tolerated, so replies may grow.
	if err := json.Unmarshal([]byte(`{"topic":"t","epoch":1,"next_id":1,"segments":[`+seg0+`,"load":7}]}`), &l); err != nil {
		t.Fatalf("unknown fields refused: %v", err)
	}
	// Short hex bounds are accepted; the encoding always writes 16 digits.
	if err := json.Unmarshal([]byte(strings.Replace(good, `"0x0000000000000000"`, `"0x0"`, 1)), &l); err != nil {
		t.Fatalf("short hex refused: %v", err)
	}

	tests := []struct {
		name, input string
		want        error
		mention     string
	}{
		{"empty", ``, ErrInvalid, "layout"},
		{"null", `null`, ErrInvalid, `missing "epoch"`},
		{"array", `[]`, ErrInvalid, "cannot unmarshal"},
		{"trailing garbage", good + `x`, ErrInvalid, "invalid character"},
		{"no segments", `{"epoch":1,"next_id":1}`, ErrInvalid, `missing "segments"`},
		{"null segments", `{"epoch":1,"next_id":1,"segments":null}`, ErrInvalid, `missing "segments"`},
		{"no next id", `{"epoch":1,"segments":[]}`, ErrInvalid, `missing "next_id"`},
		{"negative epoch", `{"epoch":-1,"next_id":1,"segments":[]}`, ErrInvalid, "epoch"},
		{"no segment id", layout(`{"state":"active"}`), ErrInvalid, `missing "id"`},
		{"null segment", layout(`null`), ErrInvalid, `missing "id"`},
		{"bad state", layout(strings.Replace(seg0, "active", "frozen", 1) + `}`), ErrInvalid, `unknown state "frozen"`},
		{"no range", layout(`{"id":0,"state":"active"}`), ErrInvalid, `missing "range"`},
		{"range of numbers", layout(`{"id":0,"state":"active","range":[0,1]}`), ErrInvalid, "want [\"0x<lo>\""},
		{"range of three", layout(`{"id":0,"state":"active","range":["0x0","0x1","0x2"]}`), ErrInvalid, "want [\"0x<lo>\""},
		{"decimal bound", layout(`{"id":0,"state":"active","range":["0","0x1"]}`), ErrBadHash, `bad hash "0"`},
		{"bad hex", layout(`{"id":0,"state":"active","range":["0x0","0xfz"]}`), ErrBadHash, `'z' is not a hex digit`},
		{"17 digits", layout(`{"id":0,"state":"active","range":["0x0","0x10000000000000000"]}`), ErrBadHash, "got 17"},
		{"lo above hi", layout(`{"id":0,"state":"active","range":["0x2","0x1"]}`), ErrInvalid, "lo > hi"},
		{"null parents", layout(strings.Replace(seg0, `"parents":[]`, `"parents":null`, 1) + `}`), ErrInvalid, `missing "parents"`},
		{"no buckets", layout(strings.Replace(seg0, `"buckets":1,`, ``, 1) + `}`), ErrInvalid, `missing "buckets"`},
		{"no sealed epoch", layout(strings.Replace(seg0, `,"sealed_epoch":0`, ``, 1) + `}`), ErrInvalid, `missing "created_epoch" or "sealed_epoch"`},
		{"negative partition", layout(seg0 + `,"partition":-1}`), ErrInvalid, "partition -1 is negative"},
		{"negative id", layout(strings.Replace(seg0, `"id":0`, `"id":-4`, 1) + `}`), ErrInvalid, "cannot unmarshal"},
		{"fractional buckets", layout(strings.Replace(seg0, `"buckets":1`, `"buckets":1.5`, 1) + `}`), ErrInvalid, "cannot unmarshal"},
		{"gap", layout(strings.Replace(seg0, "0xffffffffffffffff", "0xfffffffffffffffe", 1) + `}`), ErrInvalid, "have no active segment"},
		{"id beyond next id", strings.Replace(good, `"next_id":1`, `"next_id":0`, 1), ErrInvalid, "not below next id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := goldenLayouts(t)["layout_fixed.json"]
			l := before
			err := l.UnmarshalJSON([]byte(tt.input))
			wantErr(t, err, tt.want)
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("error %q does not mention %q", err, tt.mention)
			}
			if !reflect.DeepEqual(l, before) {
				t.Error("a refused decode changed the layout")
			}
			// Through encoding/json too, as callers will use it.
			if err := json.Unmarshal([]byte(tt.input), &l); err == nil {
				t.Error("json.Unmarshal accepted it")
			}
		})
	}
}

// FuzzUnmarshalLayout: decoding never panics; whatever it accepts is valid,
// re-encodes to an equal layout, keeps every hash's owners on one chain,
// and survives every operation and query.
func FuzzUnmarshalLayout(f *testing.F) {
	for _, l := range goldenLayouts(f) {
		data, _ := json.Marshal(l)
		f.Add(data)
	}
	f.Add([]byte(`{"epoch":1,"next_id":1,"segments":[{"id":0,"state":"active","range":["0x0","0xffffffffffffffff"],"parents":[],"children":[],"buckets":1,"created_epoch":1,"sealed_epoch":0}]}`))
	f.Add([]byte(`{"epoch":18446744073709551615,"next_id":18446744073709551615,"segments":[{"id":3,"state":"active","range":["0x0","0xffffffffffffffff"],"parents":[],"children":[],"buckets":1024,"created_epoch":1,"sealed_epoch":0}]}`))
	f.Add([]byte(`{"epoch":1,"next_id":1,"segments":[{"id":0,"state":"sealed","range":["0x1","0x0"]}]}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var l Layout
		if err := l.UnmarshalJSON(data); err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrBadHash) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("accepted an invalid layout: %v", err)
		}
		encoded, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		var back Layout
		if err := back.UnmarshalJSON(encoded); err != nil {
			t.Fatalf("re-decoding %s: %v", encoded, err)
		}
		if !reflect.DeepEqual(back, l) {
			t.Fatalf("round trip changed the layout:\n%s\n%s", formatLayout(l), formatLayout(back))
		}
		if again, _ := json.Marshal(back); !bytes.Equal(again, encoded) {
			t.Fatalf("encoding is not stable:\n%s\n%s", encoded, again)
		}
		for _, s := range l.Segments {
			for _, h := range []uint64{s.Range.Lo, s.Range.Hi, s.Range.Mid()} {
				if err := checkChain(l, h); err != nil {
					t.Fatalf("accepted layout breaks the ordering chain: %v\n%s", err, formatLayout(l))
				}
			}
		}
		l.MaxDepth()
		Readable(l, func(id SegmentID) bool { return id%2 == 0 })
		active := l.Active()
		for i, s := range active {
			for _, next := range []func() (Layout, error){
				func() (Layout, error) { return l.Split(s.ID, nil) },
				func() (Layout, error) { return l.Rebucket(s.ID, s.Buckets%MaxBuckets+1) },
				func() (Layout, error) { return l.Merge(s.ID, active[(i+1)%len(active)].ID) },
			} {
				if out, err := next(); err == nil {
					if err := out.Validate(); err != nil {
						t.Fatalf("operation on an accepted layout: %v", err)
					}
				}
			}
		}
	})
}

// FuzzParseHash: ParseHash never panics, and what it accepts in hex form
// formats back to the same value.
func FuzzParseHash(f *testing.F) {
	for _, s := range []string{"0x0", "0xffffffffffffffff", "42", "18446744073709551616", "0x", "-1", "0x1_0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseHash(s)
		if err != nil {
			if !errors.Is(err, ErrBadHash) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		if back, err := ParseHash(FormatHash(h)); err != nil || back != h {
			t.Fatalf("%q -> %#x -> %s -> %#x, %v", s, h, FormatHash(h), back, err)
		}
	})
}
