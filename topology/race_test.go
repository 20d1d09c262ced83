//go:build race

package topology

// raceEnabled shortens the long property tests under the race detector,
// which slows this allocation-heavy code about fivefold; the full length
// runs without it.
const raceEnabled = true
