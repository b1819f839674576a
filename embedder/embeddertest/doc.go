// Package embeddertest is the contract suite every embedder.Client must
// pass: order, determinism, dimensions, empty input and cancellation.
// It must not know any particular client: Run takes a constructor of the
// client under test, and the suite asserts only what every client promises.
package embeddertest
