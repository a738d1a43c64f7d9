// Package web is tetra's browser chat client: plain ES modules, HTML and CSS
// embedded with go:embed and served by the workload at "/" (index.html) and
// "/static/..." (see Handler). There is no build step, no framework and
// nothing from another origin; the Content-Security-Policy allows scripts,
// styles and connections to the page's own origin only. Sign-in is by
// pasting a token, kept in sessionStorage (per tab); the demo switch (alice,
// bob, carol) appears only when the server runs with `tetra serve --demo`
// (package server, webui.go).
//
// static/client.js implements PROTOCOL.md with no user interface. It opens
// /ws with the token in the token query parameter (browsers cannot set
// headers on a WebSocket) and one device id per tab, so two tabs of a user
// never supersede each other. After every (re)connect it lists the chats
// and pages each chat's history from its cursor (limit=500, following
// hasMore); the cursor advances only with history pages, because live frames
// may arrive out of commit order. Messages are deduplicated by messageId,
// every message frame is acknowledged, each send keeps one correlationId and
// is resent on every reconnect until answered, and reconnects wait with
// exponential backoff and jitter. A socket does not outlive its token (the
// server closes it with 4005 at exp, PROTOCOL.md §1): given a refreshToken
// callback, the application's way to mint a new token of the same user,
// client.js asks it for one 30 s before exp (halfway for shorter tokens),
// sends {"type":"refresh"} on the open socket and uses the new token from
// then on; after a 4005 it gets one before reconnecting. app.js is such an
// application only for the demo switch (it mints demo tokens again); a
// pasted token cannot be renewed, so when it expires the page signs out
// with "The token expired; sign in again." static/app.js renders: bodies through
// textContent (never HTML) with dir="auto" and overflow-wrap: anywhere; read
// frames for the newest message from another member while the chat is
// scrolled to its end; "read by ..." from incoming read frames (the API
// returns no past receipts, so they start empty on each load); unread counts
// per browser (localStorage).
//
// History pages forward only (there is no "before" cursor), so a chat's
// history is loaded from its start, in pages, when the client first syncs
// it, and kept in memory; the view renders the newest 50 messages and
// reveals 50 more at a time when the reader scrolls up or presses "load
// older". That is simple and exact for the chat sizes of a demo; a backward
// page in the API would let the view load lazily instead. A chat created
// without a message appears at the next chat-list refresh (every 20 s, on
// focus, on reconnect); one with a message appears with it.
package web
