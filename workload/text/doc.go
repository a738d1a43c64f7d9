// Package text holds the one rule every layer applies to the text a client
// sends: a body, a group title, a chat, message or correlation id, a user id
// in a token or a request. PROTOCOL.md §3: text that is not valid UTF-8 or
// contains U+0000 is refused with `invalid` on every backend alike.
//
// The rule lives here, not in a store, because the two stores disagreed
// before it did: PostgreSQL's text type cannot hold NUL and refused it,
// SQLite stored it and delivered it (issue 13, point 2). Now the wire layer
// (package protocol), the token layer (package auth), the HTTP API and both
// stores (store/sqlite, store/postgres) call the same functions, and the
// history conformance suite (history/historytest, "TextRules") runs the same
// refusals against both stores.
//
// User ids are stricter than other text: besides NUL they may contain no
// control character at all, C0 (U+0001..U+001F), DEL (U+007F) or C1
// (U+0080..U+009F), because they are shown to other people and used in
// index keys, and the auth layer and the stores once disagreed on C1.
//
// Every error wraps ErrInvalid and names the field; callers add their own
// sentinel (history.ErrInvalid, auth.ErrInvalidToken) with %w.
package text
