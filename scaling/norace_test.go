//go:build !race

package scaling

const raceEnabled = false
