//go:build !race

package crashtest

// raceEnabled: see race_on_test.go.
const raceEnabled = false
