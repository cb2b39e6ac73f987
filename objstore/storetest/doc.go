// Package storetest is the conformance suite every objstore.Store
// implementation must pass (restic's backend test suite, in the same
// spirit). An implementation's test calls Run with a function that opens a
// fresh, empty store; the suite checks the contract documented on
// objstore.Store: exact round-trips, immutable versions, atomic conditional
// create under concurrency, NOT_FOUND for absent keys and versions, paged
// ordered listing, key validation, large and empty bodies, SHA-256
// rejection, context cancellation, and a key that is a path-prefix of
// another (both kept, or the second refused BAD_KEY).
package storetest
