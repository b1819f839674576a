//go:build race

package pipeline_test

// raceEnabled makes the real-data calibration shorter: the race detector
// slows the replay several times and it has no concurrency to check.
const raceEnabled = true
