//go:build race

package crashtest

// raceEnabled: the test runs with -race, and so does the server it builds
// (it reuses the race-built packages of `go test -race ./...`, and a data
// race in the server fails the test).
const raceEnabled = true
