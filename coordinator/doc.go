// Package coordinator runs `shardproof verify` as a MapReduce-style job
// over the object store: it writes a content-addressed plan, runs map tasks
// (shards → sorted shuffle files), reduce tasks (bucket ranges → diff
// results) and the aggregation (results → report), and stores the report
// content-addressed and bound to the root digest. Snapshot members that
// declare their bucket ranges are read by the reduce task whose range
// holds them (a memberSource), not mapped: a snapshot is already
// partitioned by bucket, so only release tuples go through the shuffle.
//
// Every task is identified by (planDigest, kind, index) and reads all its
// inputs from the store by digest and exact version, so any engine can run
// it in any process, and retry it: outputs are written with a conditional
// create (an existing output must be byte-identical, else NONDETERMINISM),
// and a task counts as done only once its commit record exists. Outputs
// without a commit record are ignored. A map task whose committed output
// is found damaged or gone, or whose commit record is, runs again: new
// versions of its files, then of its record, which must name the same
// bytes (redoMap); a reduce task whose commit record is found damaged
// runs again into a new version of its record, which must give the same
// result (redoReduce); at most maxRuns runs a task, but for processes
// running it again side by side (see maxRuns). Store layout under
// jobs/<planHex>/:
//
//	map/<i>/r<j>.arrow    shuffle file of map task i for reduce range j
//	map/<i>/commit.json   map task i's outputs (digest, size, version) and per-shard results
//	reduce/<j>/commit.json reduce task j's inputs, its reducer.Result and the results of the members it read
//
// The local executor (Verify) runs the tasks on goroutines. The report is
// byte-identical, apart from its execution section, whatever the number of
// map tasks, reducers or retries, and whether members are mapped or read
// by reducers.
package coordinator
