package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/openaitest"
)

// backfillWithOpenAI is a backfill of w's table, 40 rows of it, through the
// fake OpenAI server srv with api key key.
func backfillWithOpenAI(t *testing.T, w pgWorld, srv *openaitest.Server, key string) []string {
	t.Helper()
	for i := 1; i <= 40; i++ {
		w.r.Exec(t, fmt.Sprintf(`INSERT INTO %s.articles VALUES ($1, $2, $3)`, w.r.Schema), i, fmt.Sprintf("Doc %d", i),
			fmt.Sprintf("Row %d is about tide pools, anemones and hermit crabs at low water.", i))
	}
	return []string{"backfill", "--config", w.cfg, "--progress", "none", "--page-rows", "4",
		"--set", "embedder.provider=openai", "--set", "embedder.base_url=" + srv.URL, "--set", "embedder.model=embed-x",
		"--set", "embedder.dimensions=16", "--set", "embedder.api_key=" + key, "--set", "embedder.max_batch_inputs=4"}
}

// A bad API key fails the backfill at once, with serve's start-up probe
// message, before a row is read: no summary, no reconcile line, exit 1.
func TestBackfillProbesTheEmbedderFirst(t *testing.T) {
	w := newPGWorld(t)
	srv := openaitest.New(t, openaitest.Options{APIKey: "sk-good"})
	out, err := runCLI(t, "", backfillWithOpenAI(t, w, srv, "sk-bad")...)
	require.ErrorContains(t, err, "check the embedder at start-up: ", out)
	require.ErrorContains(t, err, "401")
	require.Equal(t, ExitFailure, exitCode(err))
	require.Equal(t, int64(1), srv.Requests.Load(), "only the probe")
	require.NotContains(t, out, "backfill: ", "nothing was read")
	require.NotContains(t, out, "reconcile:")
	require.Equal(t, 0, countDocs(t, w.schema))
}

// A backfill that fails after the probe (the key revoked meanwhile) keeps
// exit 1 and says nothing about a reconcile it never ran.
func TestBackfillFailureSaysNoReconcile(t *testing.T) {
	w := newPGWorld(t)
	srv := openaitest.New(t, openaitest.Options{})
	srv.SetHook(func(r openaitest.Request) *openaitest.Fault {
		if len(r.Input) == 1 && strings.Contains(r.Input[0], "start-up probe") {
			return nil
		}
		return &openaitest.Fault{Status: 401}
	})
	out, err := runCLI(t, "", backfillWithOpenAI(t, w, srv, "sk-test")...)
	require.ErrorContains(t, err, "backfill stopped: ", out)
	require.Equal(t, ExitFailure, exitCode(err))
	require.NotContains(t, out, "reconcile:", "no reconcile ran")
}

// An interrupted backfill (SIGINT/SIGTERM cancel its context) prints no
// reconcile line and exits with serve's "interrupted" code.
func TestBackfillInterruptedExits5(t *testing.T) {
	w := newPGWorld(t)
	srv := openaitest.New(t, openaitest.Options{})
	srv.SetHook(func(openaitest.Request) *openaitest.Fault { return &openaitest.Fault{Delay: 300 * time.Millisecond} })
	args := backfillWithOpenAI(t, w, srv, "sk-test")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type result struct {
		out string
		err error
	}
	res := make(chan result, 1)
	go func() {
		out, errOut, err := runCtx(ctx, args...)
		res <- result{out + errOut, err}
	}()
	// The probe and a first page's request: the backfill is reading.
	require.Eventually(t, func() bool { return srv.Requests.Load() >= 2 }, 30*time.Second, 10*time.Millisecond)
	cancel()
	r := <-res
	require.Equal(t, ExitInterrupted, exitCode(r.err), "err: %v\n%s", r.err, r.out)
	require.ErrorContains(t, r.err, "backfill interrupted after")
	require.NotContains(t, r.out, "reconcile:", "no reconcile ran")
	require.Less(t, countDocs(t, w.schema), 40)
}
