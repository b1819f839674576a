package pgrepl

// SourceError is a failure that restarting or reconnecting does not fix:
// the slot was dropped or invalidated, the publication was dropped, a
// privilege was revoked. Its message says what happened and the steps that
// recover, in order.
type SourceError struct{ msg string }

func (e *SourceError) Error() string { return e.msg }

// Permanent reports true: the pipeline stops instead of retrying.
func (e *SourceError) Permanent() bool { return true }
