//go:build race

package chunker_test

// raceEnabled makes the real-data replay shorter: the race detector slows
// BPE counting about tenfold and the replay finds no races the short run
// would miss.
const raceEnabled = true
