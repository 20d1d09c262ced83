package cluster

import (
	"runtime"
	"testing"
)

func TestServerProcs(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	if got, want := ServerProcs(), 2*defaultProcs(); got != want {
		t.Fatalf("ServerProcs() = %d without GOMAXPROCS, want twice the runtime default %d", got, want)
	}
	t.Setenv("GOMAXPROCS", "3")
	if got := ServerProcs(); got != 3 {
		t.Fatalf("ServerProcs() = %d with GOMAXPROCS=3, want 3", got)
	}
	t.Setenv("GOMAXPROCS", "lots")
	if got, want := ServerProcs(), 2*defaultProcs(); got != want {
		t.Fatalf("ServerProcs() = %d with a malformed GOMAXPROCS, want the default %d", got, want)
	}
}

func TestSetProcs(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	if _, err := SetProcs(-1); err == nil {
		t.Fatal("SetProcs(-1) succeeded")
	}
	if runtime.GOMAXPROCS(0) != before {
		t.Fatal("a refused SetProcs changed GOMAXPROCS")
	}
	t.Setenv("GOMAXPROCS", "")
	prev, err := SetProcs(0)
	if err != nil || prev != before {
		t.Fatalf("SetProcs(0) = %d, %v; want %d, nil", prev, err, before)
	}
	if got := runtime.GOMAXPROCS(0); got != 2*defaultProcs() {
		t.Fatalf("GOMAXPROCS = %d after SetProcs(0), want %d", got, 2*defaultProcs())
	}
	if _, err := SetProcs(5); err != nil || runtime.GOMAXPROCS(0) != 5 {
		t.Fatalf("SetProcs(5): %v, GOMAXPROCS %d", err, runtime.GOMAXPROCS(0))
	}
}
