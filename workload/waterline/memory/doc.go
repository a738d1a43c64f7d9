// Package memory is the in-process waterline index: the embedded mode's
// Tetris state, and the reference the Redis index is measured against.
//
// Clients are spread over 64 shards by a hash of their connection id, each
// with its own lock, so sends and acknowledgements for different clients
// rarely contend. Every pending entry sits in two indexed min-heaps: its
// client's pin heap for its partition, keyed by position, whose root is the
// client's pin; and its shard's lease heap, keyed by lease. Sent and Ack are
// O(log n) per entry and remove exactly the entries named, so an
// out-of-order acknowledgement never lifts a pin past a gap. Withdraw drops
// a client's whole set under one lock. SafeLine reads each client's pin root
// and the live holds, O(clients); Expired walks the lease heaps best-first
// and costs O(k log k) for the k entries it returns, however many are
// pending.
//
// The index is a cache that lives and dies with the process, and every
// connection it describes dies with it, so it never needs a rebuild while it
// lives: its Identity is drawn at random once by New and never changes.
// Holds expire by the clock given to NewWithClock (time.Now for New), which
// lets tests move time without sleeping.
//
// The shared conformance suite (../waterlinetest) runs against this package
// in memory_test.go.
package memory
