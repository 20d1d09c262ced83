package cluster

import (
	"runtime"
	"testing"
)

func TestServerProcs(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	if got, want := ServerProcs(), defaultProcs(); got != want {
		t.Fatalf("ServerProcs() = %d without GOMAXPROCS, want the runtime default %d", got, want)
	}
	t.Setenv("GOMAXPROCS", "3")
	if got := ServerProcs(); got != 3 {
		t.Fatalf("ServerProcs() = %d with GOMAXPROCS=3, want 3", got)
	}
	t.Setenv("GOMAXPROCS", "lots")
	if got, want := ServerProcs(), defaultProcs(); got != want {
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
	other := defaultProcs() + 3
	prev, err := SetProcs(other)
	if err != nil || prev != before || runtime.GOMAXPROCS(0) != other {
		t.Fatalf("SetProcs(%d) = %d, %v, GOMAXPROCS %d; want %d, nil, %d", other, prev, err, runtime.GOMAXPROCS(0), before, other)
	}
	prev, err = SetProcs(0)
	if err != nil || prev != other {
		t.Fatalf("SetProcs(0) = %d, %v; want %d, nil", prev, err, other)
	}
	if got := runtime.GOMAXPROCS(0); got != defaultProcs() {
		t.Fatalf("GOMAXPROCS = %d after SetProcs(0), want the default %d", got, defaultProcs())
	}
}
