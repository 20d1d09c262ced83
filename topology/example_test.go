package topology_test

import (
	"fmt"

	"github.com/braidmq/braid/topology"
)

func ExampleLayout_Split() {
	l, _ := topology.New(2, 4)
	l, _ = l.Split(0, nil)
	for _, s := range l.Active() {
		fmt.Println(s.ID, s.Range, s.Buckets)
	}
	// Output:
	// 2 [0x0000000000000000,0x3fffffffffffffff] 2
	// 3 [0x4000000000000000,0x7fffffffffffffff] 2
	// 1 [0x8000000000000000,0xffffffffffffffff] 2
}

func ExampleLayout_Merge() {
	l, _ := topology.New(4, 4)
	if _, err := l.Merge(0, 2); err != nil {
		fmt.Println(err)
	}
	l, _ = l.Merge(2, 1)
	child, _ := l.Segment(4)
	fmt.Println(child.Range, child.Parents)
	// Output:
	// braid/topology: segments 0 and 2 are not adjacent: [0x0000000000000000,0x3fffffffffffffff] and [0x8000000000000000,0xbfffffffffffffff]
	// [0x4000000000000000,0xbfffffffffffffff] [1 2]
}

// The ordering rule waits for every ancestor, not only the parents.
func ExampleReadable() {
	l, _ := topology.New(1, 1)
	l, _ = l.Split(0, nil) // 0 -> 1, 2
	l, _ = l.Split(1, nil) // 1 -> 3, 4
	drained := map[topology.SegmentID]bool{1: true}
	isDrained := func(id topology.SegmentID) bool { return drained[id] }
	fmt.Println(topology.Readable(l, isDrained))
	drained[0] = true
	fmt.Println(topology.Readable(l, isDrained))
	// Output:
	// [0]
	// [2 3 4]
}

func ExampleParseHash() {
	at, _ := topology.ParseHash("0xc000000000000000")
	fmt.Println(topology.FormatHash(at))
	_, err := topology.ParseHash("0xc0000000000000000")
	fmt.Println(err)
	// Output:
	// 0xc000000000000000
	// braid/topology: bad hash "0xc0000000000000000": want 1 to 16 hex digits after 0x, got 17
}
