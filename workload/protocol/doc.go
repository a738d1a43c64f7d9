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
// Before encoding/json sees a frame, strict.go refuses what encoding/json
// would quietly accept: keys in another letter case, duplicate keys, invalid
// UTF-8 and unpaired UTF-16 surrogate escapes (docs/PROTOCOL.md, "Additions").
package protocol
