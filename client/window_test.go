package client

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestWindowBlocksWhenFullAndWakesOnRelease(t *testing.T) {
	w := newWindow(2)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if err := w.acquire(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan error, 3)
	for i := 0; i < 3; i++ {
		go func() { got <- w.acquire(ctx, nil) }()
	}
	select {
	case err := <-got:
		t.Fatalf("acquire on a full window returned %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	w.release(2) // two of the three waiters get a place, the third waits on
	deadline := time.After(5 * time.Second)
	for i := 0; i < 2; i++ {
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-deadline:
			t.Fatal("a waiter was not woken by release")
		}
	}
	select {
	case err := <-got:
		t.Fatalf("a third acquire got a place out of two released: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	w.release(1)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the last waiter was not woken")
	}
}

func TestWindowAcquireGivesUp(t *testing.T) {
	w := newWindow(1)
	if err := w.acquire(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.acquire(ctx, nil) }()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire after cancel: %v, want context.Canceled", err)
	}
	closed := make(chan struct{})
	go func() { errc <- w.acquire(context.Background(), closed) }()
	close(closed)
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("acquire after close: %v, want ErrClosed", err)
	}
	// Neither gave-up acquire took the place: one release makes one free.
	w.release(1)
	if err := w.acquire(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if w.free != 0 {
		t.Fatalf("free = %d after taking the released place, want 0", w.free)
	}
}
