// Package faults holds objstore.Store decorators that wrap a real store and
// break exactly one method, the way restic's errorBackend and pebble's
// errorfs do. Tests of verify, the mapper and the trainer use them to show
// that corruption, truncation, transient failures and stale listings are
// detected rather than trusted. Every other method passes through to the
// wrapped store unchanged.
package faults
