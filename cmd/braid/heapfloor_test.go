package main

import "testing"

func TestFloorPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		floor, live uint64
		want        int
	}{
		{64 * mib, 0, 100},                    // nothing measured yet
		{64 * mib, 16 * mib, 300},             // target 64 MiB
		{64 * mib, 12 * mib, 433},             // target about 64 MiB
		{64 * mib, 32 * mib, 100},             // half the floor: the default
		{64 * mib, 200 * mib, 100},            // far over it
		{64 * mib, 1 * mib, heapFloorMaxGOGC}, // bounded
	} {
		if got := floorPercent(c.floor, c.live); got != c.want {
			t.Errorf("floorPercent(%d MiB, %d B) = %d, want %d", c.floor/mib, c.live, got, c.want)
		}
	}
}
