// Package poll is the tests' one way to wait for something: poll a
// condition until it holds or a deadline passes. Tests never wait with a
// bare sleep; where the thing waited for is driven by time, they advance a
// clock.Fake instead.
package poll

import (
	"testing"
	"time"
)

// Every is how often a condition is polled.
const Every = 5 * time.Millisecond

// Eventually polls cond until it holds, failing t with what if it does not
// within timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(timeout, cond) {
		t.Fatalf("%s: not within %s", what, timeout)
	}
}

// EventuallyNil polls f until it returns nil, failing t with what and f's
// last error if it does not within timeout.
func EventuallyNil(t testing.TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	var last error
	if !Until(timeout, func() bool { last = f(); return last == nil }) {
		t.Fatalf("%s: not within %s: %v", what, timeout, last)
	}
}

// Until polls cond until it holds (true) or timeout passes (false).
func Until(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(Every)
	}
}
