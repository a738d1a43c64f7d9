// Package web is tetra's browser chat client: plain ES modules, HTML and CSS
// embedded in the binary with go:embed and served by the workload at "/"
// (index.html) and "/static/...". There is no build step, no framework and
// nothing loaded from another origin; the page's Content-Security-Policy
// allows scripts, styles and connections to its own origin only.
//
// The client implements the client contract of PROTOCOL.md in
// static/client.js, kept apart from the user interface in static/app.js. It
// opens /ws with the token in the token query parameter (browsers cannot set
// headers on a WebSocket) and one device id per tab, so two tabs of one user
// never supersede each other. After every (re)connect it lists the chats and
// pages each chat's history from its cursor (limit=500, following hasMore);
// the cursor advances only with history pages, because live frames may
// arrive out of commit order. Messages are deduplicated by messageId, every
// message frame is acknowledged, sends carry a correlationId that is resent
// unchanged on every reconnect until the server answers, and reconnects wait
// with exponential backoff and jitter. Bodies are rendered with textContent,
// never as HTML, with dir="auto" and overflow-wrap: anywhere.
//
// History pages forward only (there is no "before" cursor), so a chat's
// history is loaded from its start, in pages, when the client first syncs
// it; the view renders the newest messages and reveals older ones, already
// in memory, when the reader scrolls up or presses "load older". The token
// lives in sessionStorage (per tab, gone when the tab closes). The demo
// switch (sign in as alice, bob or carol) appears only when the server runs
// with `tetra serve --demo`; see package server (webui.go).
package web
