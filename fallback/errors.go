package fallback

import (
	"errors"
	"fmt"
)

// ErrNoReply is returned by Client.Search when the context ends before a
// reply arrives (wrapped together with the context's error).
var ErrNoReply = errors.New("no reply from the front door")

// ErrNotRunnable is returned by Run when the FrontDoor was built without an
// Embedder or Searcher (allowed for DLQ operations only).
var ErrNotRunnable = errors.New("front door needs an Embedder and a Searcher to run")

// errLockWait means another worker held the miss lock for longer than
// LockWait without publishing a result; the request is retried.
var errLockWait = errors.New("timed out waiting for a coalesced search")

// InvalidRequestError says why a request was refused. Its message is sent
// back as the reply's reason. It is permanent: retrying the same request
// cannot succeed.
type InvalidRequestError struct {
	Field  string
	Reason string
}

func (e *InvalidRequestError) Error() string {
	return fmt.Sprintf("invalid request: %s: %s", e.Field, e.Reason)
}

// Permanent reports true: the request itself is wrong.
func (e *InvalidRequestError) Permanent() bool { return true }

// ReplyError is returned by Client.Search when the front door answered with
// status "error". Reason is the reply's reason field.
type ReplyError struct {
	ID     string
	Reason string
}

func (e *ReplyError) Error() string {
	return fmt.Sprintf("front door request %s: %s", e.ID, e.Reason)
}
