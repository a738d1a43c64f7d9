// Package waterlinetest is the conformance suite every waterline.Index
// implementation runs unchanged: Run(t, newIndex) exercises one fresh index
// per subtest through the interface only.
//
// It checks the properties the design paper rests on rather than an
// implementation's internals: the pin is contiguous (an out-of-order
// acknowledgement never lifts it past a gap), a withdrawal removes a client's
// whole pending set and is never an acknowledgement, holds take part in the
// safe-delete line until their ttl passes, Expired returns due entries
// earliest lease first and only them, Restore never overwrites what is
// pending, and Reset forgets everything including the primed flag. A
// randomized test compares every answer with a plain model, and a concurrent
// test (run it with -race) checks the final line against an independently
// computed minimum.
//
// The suite needs no injected clock: it waits for short real hold ttls
// (hundreds of milliseconds) by polling against a deadline, so a Redis-backed
// index with server-side expiry runs it as is. Subtests call t.Parallel, so
// newIndex must return an isolated index each time (a key prefix per test
// for Redis). The leases given to Sent are whole milliseconds, which an
// implementation storing millisecond scores represents exactly.
package waterlinetest
