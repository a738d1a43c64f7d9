// Package protocol holds the wire contract of tetra's WebSocket API: the
// frames a client and the server exchange, the error codes, the close codes,
// and a strict decoder for client frames.
//
// The contract itself is ../../shared/PROTOCOL.md (kept in the repository as
// docs/protocol.md); this package is its Go form. Every exported frame type
// maps one row of the frame tables of PROTOCOL.md §3, with camelCase JSON
// field names.
//
// DecodeClient is the only way the server turns client bytes into frames. It
// never panics, rejects unknown types and missing fields with an *Error whose
// Code is one of the codes of PROTOCOL.md §3, and is fuzzed (FuzzDecodeClient).
package protocol
