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
// (following nextCursor; each carries lastMessage and lastActivity,
// PROTOCOL.md §7.2), and catches up the chats whose history it holds by
// paging forward from their cursor (limit=500, following hasMore); the
// cursor advances only with history pages, because live frames may arrive
// out of commit order. A chat's history is fetched only when it is opened:
// its newest 50 messages in one request (before=end, §7.1), then 50 older
// ones at a time (before=<oldest held>) as the reader scrolls up. Messages are deduplicated by messageId,
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
// with "The token expired; sign in again."
//
// Read state and membership are the server's (PROTOCOL.md §2, §3): every
// chat listing carries each member's lastRead and the caller's unread;
// read frames, the reader's own from its other devices included, move a
// marker forward only, so unread counts and "read by" survive reloads and
// agree across devices and browsers. `chat` events (added, removed,
// updated) keep the chat list current without a reload, and every full
// listing drops chats the server no longer lists. Leaving and removal are
// DELETE /api/chats/{chatId}/members/{userId}.
//
// Edits and deletes (§7.3) are messages carrying edits or deletes: they
// change their original (new body and editedAt, or the tombstone) and are
// never shown themselves; history pages return originals already changed.
// An edit is a send with edits, queued and resent like any send; a delete
// is DELETE /api/chats/{chatId}/messages/{messageId}, by the sender or a
// group admin. Typing frames go out at most once per chat every 2 s while
// the user types, and a sender shows as typing for 5 s after its last one;
// presence comes from GET /api/presence after each listing and presence
// frames after that (§7.4). A group's admins (§7.5) rename it (PATCH),
// make members admins (POST .../admins), remove members and delete any
// message; its history ("shared" or "member", §7.6) is chosen at creation.
//
// static/app.js renders. Bodies go through text nodes, never HTML: http
// and https addresses become <a target="_blank" rel="noopener noreferrer">
// with the address as its text, nothing else becomes markup. Every piece of
// user text sits in an element that isolates its direction (<bdi>, or a
// block with dir="auto" and unicode-bidi: isolate or plaintext), so an RLO
// in a name, a title or a body reorders nothing around it; a bubble and its
// body clip what combining marks stack past them (Zalgo). Consecutive
// messages of one sender within five minutes of the same day share one
// header; a separator names each day (Today, Yesterday, a date). A group's
// header shows its title and member count; the member list (admins marked,
// with the admins' rename, "make admin" and remove, adding, the history
// setting, and leaving after a confirmation) opens on demand and scrolls
// within half the conversation. Own bubbles (any, for a group's admins)
// carry a ⋯ menu: Edit puts the text in the composer ("Editing message",
// Enter saves, Escape cancels), Delete asks first; edited bubbles say
// "edited", deleted ones "message deleted". A line under the conversation
// says who is typing; avatars carry an online dot, and a direct chat's
// header says "online" or "last seen". Read frames
// go out for the newest message from another member while the chat is on
// screen and scrolled to its end. Wider than 640 px, the chat list sits
// beside the conversation; narrower (a phone), one shows at a time, and the
// back button or the browser's back returns to the list.
//
// A chat's unread count is the server's (capped at 1000, shown "1000+")
// until this user's read marker is among the messages held. A chat one is
// added to appears with its "added" event; a group created with one as a
// member announces itself with its first message, or at the next
// chat-list refresh (every 20 s, on focus, on reconnect).
package web
