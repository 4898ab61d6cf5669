//go:build !race

package cluster

// raceEnabled: see race.go.
const raceEnabled = false
