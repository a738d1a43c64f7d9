// tetra operator page: polls GET /admin/series with the admin token and
// draws each series on a <canvas>. Values are only ever written with
// textContent or drawn; nothing from the server becomes markup.
"use strict";
(function () {
  var KEY = "tetra.adminToken";
  var COLORS = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2"];
  var timer = null;

  function $(id) { return document.getElementById(id); }
  function status(text, isError) {
    var el = $("status");
    el.textContent = text;
    el.className = isError ? "error" : "";
  }
  function token() { return sessionStorage.getItem(KEY) || ""; }

  // rate turns a counter series into per-second deltas.
  function rate(samples, get) {
    var out = [];
    for (var i = 1; i < samples.length; i++) {
      var dt = (samples[i].t - samples[i - 1].t) / 1000;
      var dv = get(samples[i]) - get(samples[i - 1]);
      out.push({ t: samples[i].t, v: dt > 0 && dv >= 0 ? dv / dt : 0 });
    }
    return out;
  }
  function gauge(samples, get) {
    return samples.map(function (s) { return { t: s.t, v: get(s) }; });
  }
  function sumMap(m) {
    var n = 0;
    if (m) { Object.keys(m).forEach(function (k) { n += m[k]; }); }
    return n;
  }
  function deliveries(s) { return sumMap(s.deliveries); }

  // ratio is deliveries per accepted over a sliding 10 s window.
  function ratio(samples) {
    var out = [], w = 10;
    for (var i = w; i < samples.length; i++) {
      var da = samples[i].accepted - samples[i - w].accepted;
      var dd = deliveries(samples[i]) - deliveries(samples[i - w]);
      out.push({ t: samples[i].t, v: da > 0 ? dd / da : 0 });
    }
    return out;
  }

  function fmt(v) {
    if (Math.abs(v) >= 1000) { return Math.round(v).toString(); }
    if (Math.abs(v) >= 10) { return v.toFixed(1); }
    return v.toFixed(2);
  }

  // draw plots named lines ([{name, points}]) on a canvas.
  function draw(id, lines, tmin, tmax) {
    var c = $(id), ctx = c.getContext("2d");
    var W = c.width, H = c.height, L = 50, R = 8, T = 8, B = 20;
    ctx.clearRect(0, 0, W, H);
    var vmax = 0;
    lines.forEach(function (l) { l.points.forEach(function (p) { if (p.v > vmax) { vmax = p.v; } }); });
    if (vmax <= 0) { vmax = 1; }
    vmax *= 1.1;
    var span = Math.max(1, tmax - tmin);
    function x(t) { return L + (W - L - R) * (t - tmin) / span; }
    function y(v) { return T + (H - T - B) * (1 - v / vmax); }
    ctx.strokeStyle = "#ccc"; ctx.fillStyle = "#555"; ctx.font = "11px sans-serif"; ctx.lineWidth = 1;
    for (var g = 0; g <= 4; g++) {
      var gv = vmax * g / 4, gy = y(gv);
      ctx.beginPath(); ctx.moveTo(L, gy); ctx.lineTo(W - R, gy); ctx.stroke();
      ctx.fillText(fmt(gv), 2, gy + 4);
    }
    ctx.fillText("-" + Math.round(span / 1000) + " s", L, H - 5);
    ctx.fillText("now", W - R - 22, H - 5);
    lines.forEach(function (l, i) {
      ctx.strokeStyle = COLORS[i % COLORS.length]; ctx.lineWidth = 1.5;
      ctx.beginPath();
      l.points.forEach(function (p, j) {
        if (j === 0) { ctx.moveTo(x(p.t), y(p.v)); } else { ctx.lineTo(x(p.t), y(p.v)); }
      });
      ctx.stroke();
      if (lines.length > 1) {
        ctx.fillStyle = COLORS[i % COLORS.length];
        ctx.fillText(l.name, L + 6 + 90 * i, T + 10);
      }
    });
  }
  function now(id, text) { $(id).textContent = text; }
  function last(points) { return points.length ? points[points.length - 1].v : 0; }

  function render(body) {
    var s = body.samples || [];
    if (s.length < 2) { status("Waiting for samples (" + s.length + ")…", false); return; }
    var tmin = s[0].t, tmax = s[s.length - 1].t;
    var acc = rate(s, function (x) { return x.accepted; });
    draw("c-accepted", [{ name: "accepted/s", points: acc }], tmin, tmax);
    now("n-accepted", "now " + fmt(last(acc)) + " msg/s, total " + s[s.length - 1].accepted);
    var r = ratio(s);
    draw("c-ratio", [{ name: "deliveries/accepted", points: r }], tmin, tmax);
    now("n-ratio", "10 s window: " + fmt(last(r)));
    var d = gauge(s, function (x) { return x.outboxDepth; });
    draw("c-depth", [{ name: "depth", points: d }], tmin, tmax);
    now("n-depth", "now " + last(d) + " rows");
    var o = gauge(s, function (x) { return x.oldestAgeSeconds; });
    draw("c-oldest", [{ name: "oldest", points: o }], tmin, tmax);
    now("n-oldest", "now " + fmt(last(o)) + " s");
    var cc = gauge(s, function (x) { return x.connected; });
    draw("c-connected", [{ name: "connected", points: cc }], tmin, tmax);
    now("n-connected", "now " + last(cc));
    var reasons = {};
    s.forEach(function (x) { Object.keys(x.withdrawals || {}).forEach(function (k) { reasons[k] = true; }); });
    var lines = Object.keys(reasons).sort().map(function (k) {
      return { name: k, points: rate(s, function (x) { return (x.withdrawals || {})[k] || 0; }) };
    });
    draw("c-withdrawals", lines, tmin, tmax);
    var totals = s[s.length - 1].withdrawals || {};
    now("n-withdrawals", "totals: " + Object.keys(totals).sort().map(function (k) { return k + "=" + totals[k]; }).join(" "));
    status("Updated " + new Date(tmax).toLocaleTimeString() + " · " + s.length + " samples", false);
  }

  function poll() {
    var tok = token();
    if (!tok) { status("Paste an admin token (tetra token --admin).", true); return; }
    var minutes = $("minutes").value;
    fetch("/admin/series?minutes=" + encodeURIComponent(minutes), {
      headers: { "Authorization": "Bearer " + tok }, cache: "no-store", credentials: "omit"
    }).then(function (resp) {
      if (resp.status === 401) { throw new Error("token refused (401): mint one with tetra token --admin"); }
      if (resp.status === 403) { throw new Error("a user token is not enough (403): mint an admin token with tetra token --admin"); }
      if (!resp.ok) { throw new Error("GET /admin/series: HTTP " + resp.status); }
      return resp.json();
    }).then(render).catch(function (err) { status(String(err.message || err), true); });
  }

  function start() {
    if (timer) { clearInterval(timer); }
    poll();
    timer = setInterval(poll, 2000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    $("save").addEventListener("click", function () {
      var v = $("token").value.trim();
      $("token").value = "";
      if (v) { sessionStorage.setItem(KEY, v); }
      start();
    });
    $("forget").addEventListener("click", function () {
      sessionStorage.removeItem(KEY);
      if (timer) { clearInterval(timer); timer = null; }
      status("Token forgotten.", false);
    });
    $("minutes").addEventListener("change", start);
    if (token()) { start(); }
  });
})();
