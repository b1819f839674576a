// Package embeddertest is the contract suite every embedder.Client must
// pass: order, determinism, dimensions, empty input and cancellation.
package embeddertest
