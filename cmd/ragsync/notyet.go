package main

import "errors"

// ExitNotYet: `query --after` got no answer because the index had not
// reached the position or time asked for in time; asking again later may
// succeed.
const ExitNotYet = 6

// errNotYet is what `query --after` returns (wrapped in an exitError with
// ExitNotYet) when the index has not reached --after in time.
var errNotYet = errors.New("not yet")
