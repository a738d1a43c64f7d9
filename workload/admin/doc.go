// Package admin embeds the operator page served at /admin: a static HTML
// page, a stylesheet and a plain script (no build step, no CDN) that plot
// the server's own once-a-second samples from GET /admin/series on
// <canvas> elements. The page itself carries no data and needs no token;
// every data request it makes carries the admin token the operator pastes
// into it (kept in sessionStorage, minted by `tetra token --admin`).
package admin
