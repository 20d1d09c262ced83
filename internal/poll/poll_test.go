package poll

import (
	"errors"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	t.Parallel()
	n := 0
	if !Until(time.Minute, func() bool { n++; return n == 3 }) {
		t.Fatal("Until gave up on a condition that came true")
	}
	if n != 3 {
		t.Fatalf("polled %d times, want 3", n)
	}
	if Until(20*time.Millisecond, func() bool { return false }) {
		t.Fatal("Until reported a condition that never held")
	}
}

func TestEventuallyNil(t *testing.T) {
	t.Parallel()
	n := 0
	EventuallyNil(t, time.Minute, "third try", func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
}
