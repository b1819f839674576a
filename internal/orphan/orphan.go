// Package orphan keeps the ragsync processes that tests and benchmarks
// start from outliving them. A test binary killed by go test's timeout, or
// a benchmark stopped with SIGKILL, runs no cleanup: a ragsync it started
// would go on holding its replication slot (which retains WAL for the
// whole cluster), its connections and its schema, and the next suite on
// the cluster runs short of them.
package orphan
