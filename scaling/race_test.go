//go:build race

package scaling

// raceEnabled shortens the long simulations under the race detector; the
// full length runs without it.
const raceEnabled = true
