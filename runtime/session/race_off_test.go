//go:build !race

package session

// raceDetector is true when the tests run under the race detector (-race),
// whose shadow memory makes resident-set sizes say little about the code.
const raceDetector = false
