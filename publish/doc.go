// Package publish is the publisher's side of the atomic cutover: it turns
// a staged root digest into the value of an alias, and keeps published
// roots' permits in step with the fences.
//
// Publish verifies the root against its dataset snapshot and the current
// fence documents (or reuses the report the gate already holds for the
// same root at or above the current fences), registers the release with
// the gate, and moves the alias with one compare-and-swap command on its
// generation. A candidate that fails verification is registered INVALID
// and the alias never moves. Because the gate recognises a retried publish
// by (alias, expected generation, root), a publish whose outcome was lost
// is simply sent again.
//
// Recheck answers a fence advance: it computes the hits of the new
// tombstone or benchmark documents against a published root and records
// them, so the gate renews the root's permits only with zero hits.
//
// The package does not import the verifier: the CLI passes the
// coordinator's executor as a VerifyFunc, which keeps Arrow and Parquet out
// of the publish path's dependencies.
package publish
