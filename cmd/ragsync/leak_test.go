package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine is still alive once every test has
// finished and cleaned up.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
