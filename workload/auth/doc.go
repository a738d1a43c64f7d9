// Package auth mints and verifies the bearer tokens of PROTOCOL.md §1: JWTs
// signed with HS256, whose sub claim is the user id and whose exp, when
// present, is honoured.
//
// The secret comes from TETRA_JWT_SECRET or, when that is unset, from a
// random secret persisted in the data directory (file jwt.secret, mode 0600)
// so that `tetra serve` and `tetra token` run against the same directory
// agree. The server creates the file (LoadSecret: atomically, through a
// fsynced temporary file linked into place); `tetra token` only reads it
// (ReadSecret) and refuses when there is none, since a token signed with a
// secret it made up would be refused by every server. Verification accepts HS256 only: tokens signed with "none", RS256
// or any other algorithm are refused, as are expired tokens and tokens
// without a sub.
package auth
