// Package trainer is the worker side of a training run: the sidecar or
// init container (`shardproof worker`) that stands between a trainer and
// the object store.
//
// A run was pinned to one root digest when the gate created it. A worker
// reads that root from the run, never from an alias, so workers started
// before an alias switch, workers added by a scale-out after it and
// replacements for dead ranks all read the same release. For its rank it
// fetches the root manifest by digest, fills a digest-addressed local
// Cache with its assigned shards read at their exact object versions
// (re-hashing any entry already present, so a corrupt or stale entry is
// refetched and counted), optionally decodes each shard (ShardVerifier),
// verifies again any entry that is no longer the file it verified (another
// process wrote the cache while the other shards were fetched), attests (runId, rank, root, shard digests) to the gate and waits at the
// barrier. Only then does /readyz turn green; it turns red again while the
// run's permit is closed by a fence advance, or while a cache entry that
// changed on disk since it was verified (a stat per entry per poll) is
// verified again, and the worker exits with the
// run's failure code (ROOT_MISMATCH, BARRIER_TIMEOUT, RUN_FAILED, …) when
// the run fails. Metrics are Prometheus, labelled by release digest.
//
// A cache is unbounded unless Cache.SetMaxBytes bounds it (worker
// --cache-max-bytes). Workers of other ranks and runs may share its
// directory: on unix each holds a shared flock on every entry it verified
// for as long as it lives (the lock dies with a crashed worker), and
// marks each entry it fetches or finds intact as used (<dir>/used/<hex>).
// Before fetching, Cache.Admit refuses a rank whose shards alone, by the
// root manifest's sizes, exceed the bound (CACHE_TOO_SMALL, nothing
// changed), then evicts entries not the rank's, least recently used
// first, skipping every entry another process holds locked (a worker, or
// a trainer holding a shared flock on the files it reads) and every temp
// file, until the rank's shards fit (CACHE_FULL, nothing removed, when
// they cannot), and reserves the bytes of those not in the cache yet (a
// temp file of their size, which each fetch hands on to its own), so
// workers filling one cache at once stay within the bound together.
// Cache.Prune (`shardproof cache prune`) evicts by the same rules
// offline. Elsewhere than unix there are no locks, and no bound.
package trainer
