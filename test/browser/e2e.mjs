// End-to-end tests of the tetra web client (workload/web) in headless
// Chromium, driven through npm's playwright-core. browser_test.go starts the
// server and runs this script once per scenario:
//
//   TETRA_URL=http://127.0.0.1:8080 node e2e.mjs [scenario...]
//
// Environment:
//   TETRA_URL          the server (required; it must run with --demo)
//   TETRA_CONTROL_URL  the Go test's control endpoint (restart the server,
//                      mint tokens, send messages from Go); scenarios that
//                      need it fail without it
//   CHROMIUM           the browser (default /usr/bin/chromium)
//   README_SHOT        where the "readme" scenario saves its screenshot
//
// Exit status 0 when every scenario passed, 1 otherwise. Screenshots go to
// screenshots/ (git-ignored).

import { chromium } from 'playwright-core';
import { mkdirSync, readdirSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';

const BASE = process.env.TETRA_URL;
const CONTROL = process.env.TETRA_CONTROL_URL;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const SHOTS = fileURLToPath(new URL('./screenshots/', import.meta.url));
const WAIT = 30000; // bound for anything that must happen (generous: CI runs this beside -race suites on 2 cores)

// The flags of shared/NOTES.md. playwright adds --headless and a fresh
// --user-data-dir (a new temporary profile per launch, removed on close).
const FLAGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-quic',
  '--no-first-run',
];

// ---- helpers -------------------------------------------------------------

async function control(path, body) {
  assert.ok(CONTROL, `${path}: TETRA_CONTROL_URL is not set (run through browser_test.go)`);
  const res = await fetch(CONTROL + path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body ?? {}),
  });
  const text = await res.text();
  assert.equal(res.status, 200, `control ${path}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : {};
}

async function demoToken(user) {
  const res = await fetch(`${BASE}/demo/token`, { method: 'POST', body: JSON.stringify({ user }) });
  assert.equal(res.status, 200, 'POST /demo/token (is the server running with --demo?)');
  return (await res.json()).token;
}

/**
 * signIn opens the page in a new browser context (its own sessionStorage:
 * another "window" of another user) and signs in with the demo switch or
 * by pasting a token. Dialogs are recorded (and dismissed), page errors too.
 */
async function signIn(browser, user, how = 'demo', setup = () => {}) {
  const context = await browser.newContext({ viewport: { width: 1180, height: 760 } });
  const page = await context.newPage();
  setup(page);
  page.dialogs = [];
  page.errors = [];
  page.on('dialog', (d) => {
    page.dialogs.push(d.message());
    d.dismiss().catch(() => {});
  });
  page.on('pageerror', (e) => page.errors.push(e.message));
  page.logs = [];
  page.on('console', (m) => page.logs.push(`${m.type()}: ${m.text()}`));
  await page.goto(BASE);
  if (how === 'demo') {
    await page.click(`[data-demo-user="${user}"]`);
  } else {
    await page.fill('#token-input', await demoToken(user));
    await page.click('#token-submit');
  }
  await connected(page);
  assert.equal(await page.textContent('#me'), user);
  return page;
}

const connected = (page) => page.waitForSelector('#conn[data-state="connected"]', { timeout: WAIT });

async function createChat(page, kind, members, title = '') {
  await page.fill('#new-members', members.join(', '));
  await page.fill('#new-title', title);
  await page.click(kind === 'direct' ? '#new-direct' : '#new-group');
  // The page clears the form and opens the new chat in one go once the
  // server answered: before that, aria-current may still name the chat
  // that was open (seen in CI: a group's id read as the direct chat's).
  await page.waitForFunction(() => document.querySelector('#new-members').value === '', null, { timeout: WAIT });
  await page.waitForSelector('.chat-item[aria-current="true"]', { timeout: WAIT });
  return page.getAttribute('.chat-item[aria-current="true"]', 'data-chat-id');
}

async function openChat(page, chatId) {
  await page.click(`.chat-item[data-chat-id="${chatId}"]`, { timeout: WAIT });
  await page.waitForSelector(`.chat-item[data-chat-id="${chatId}"][aria-current="true"]`);
}

/** send types body into the composer and presses Enter. */
async function send(page, body) {
  await page.fill('#composer-input', body);
  await page.press('#composer-input', 'Enter');
}

/** bodies returns the rendered bodies of the open chat, in order. */
const bodies = (page) => page.$$eval('#message-list .body', (els) => els.map((e) => e.textContent));

/** waitBodies waits until every body in want is rendered in the open chat. */
async function waitBodies(page, want) {
  try {
    await page.waitForFunction(
      (want) => {
        const have = new Set([...document.querySelectorAll('#message-list .body')].map((e) => e.textContent));
        return want.every((b) => have.has(b));
      },
      want,
      { timeout: WAIT },
    );
  } catch (err) {
    throw new Error(`bodies not shown: ${JSON.stringify(want.filter((b) => b.length < 100))}; have ${JSON.stringify(await bodies(page))}: ${err.message}`);
  }
}

/** settled waits until no message of the open chat is still pending. */
const settled = (page) =>
  page.waitForFunction(() => !document.querySelector('#message-list .msg:not([data-message-id])'), null, { timeout: WAIT });

/** idCounts maps each rendered messageId to its number of DOM nodes. */
const idCounts = (page) =>
  page.$$eval('[data-message-id]', (els) => {
    const n = {};
    for (const e of els) n[e.dataset.messageId] = (n[e.dataset.messageId] || 0) + 1;
    return n;
  });

async function assertNoDuplicates(page, label) {
  const counts = await idCounts(page);
  const dup = Object.entries(counts).filter(([, n]) => n !== 1);
  assert.deepEqual(dup, [], `${label}: messageIds rendered more than once`);
  const texts = await bodies(page);
  assert.equal(new Set(texts).size, texts.length, `${label}: a body is shown twice: ${JSON.stringify(texts)}`);
  return counts;
}

async function shot(page, name) {
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: `${SHOTS}${name}.png` });
}

function clean(page, label) {
  assert.deepEqual(page.dialogs, [], `${label}: dialogs fired`);
  assert.deepEqual(page.errors, [], `${label}: page errors`);
}

/** history fetches a chat's whole history through the API, as user. */
async function history(user, chatId) {
  const token = await demoToken(user);
  const out = [];
  let since = '';
  for (;;) {
    const res = await fetch(`${BASE}/api/chats/${chatId}/messages?limit=500${since && `&since=${since}`}`, {
      headers: { Authorization: `Bearer ${token}` },
    });
    const page = await res.json();
    out.push(...page.messages);
    if (!page.hasMore || !page.messages.length) return out;
    since = page.messages.at(-1).messageId;
  }
}

// ---- scenarios -----------------------------------------------------------

const scenarios = {
  /** Two windows, two users: both directions, unread count, read receipts, a group. */
  async two_users(browser) {
    const alice = await signIn(browser, 'alice');
    const bob = await signIn(browser, 'bob');

    const chat = await createChat(alice, 'direct', ['bob']);
    await send(alice, 'hi bob');
    await waitBodies(alice, ['hi bob']);
    await settled(alice);

    // bob learns of the chat from the message itself and counts it unread.
    await bob.waitForSelector(`.chat-item[data-chat-id="${chat}"] .unread[data-unread="1"]`, { timeout: WAIT });
    await openChat(bob, chat);
    await waitBodies(bob, ['hi bob']);
    await bob.waitForSelector(`.chat-item[data-chat-id="${chat}"]:not(:has(.unread))`, { timeout: WAIT });

    // bob's window shows the message, so bob's receipt reaches alice.
    await alice.waitForFunction(
      () => [...document.querySelectorAll('#message-list .msg')].some((m) => m.querySelector('.body').textContent === 'hi bob' && m.querySelector('.receipt')?.textContent === 'read by bob'),
      null,
      { timeout: WAIT },
    );

    await send(bob, 'hello alice');
    await waitBodies(alice, ['hi bob', 'hello alice']);
    await bob.waitForFunction(
      () => document.querySelector('#message-list .msg:last-child .receipt')?.textContent === 'read by alice',
      null,
      { timeout: WAIT },
    );
    assert.deepEqual(await bodies(alice), ['hi bob', 'hello alice']);
    assert.deepEqual(await bodies(bob), ['hi bob', 'hello alice']);

    // A group, then a member added from the chat header.
    const group = await createChat(alice, 'group', ['bob'], 'Team');
    await alice.fill('#add-member-input', 'carol');
    await alice.press('#add-member-input', 'Enter');
    await alice.waitForFunction(() => document.querySelector('#chat-members').textContent.includes('carol'), null, { timeout: WAIT });
    await send(alice, 'welcome, carol');
    const carol = await signIn(browser, 'carol', 'token');
    await openChat(carol, group);
    await waitBodies(carol, ['welcome, carol']);
    await bob.waitForSelector(`.chat-item[data-chat-id="${group}"] .unread[data-unread="1"]`, { timeout: WAIT });

    await shot(alice, 'two_users-alice');
    await shot(bob, 'two_users-bob');
    for (const [p, n] of [[alice, 'alice'], [bob, 'bob'], [carol, 'carol']]) {
      await assertNoDuplicates(p, n);
      clean(p, n);
    }
  },

  /**
   * The server restarts mid-conversation on the same data directory. While
   * it is down both users write; right after it is back, a third device of
   * alice sends from Go (so those reach the pages from history or live,
   * whichever comes first). Every message must be shown exactly once.
   */
  async restart(browser) {
    const alice = await signIn(browser, 'alice', 'token');
    const bob = await signIn(browser, 'bob', 'token');
    const chat = await createChat(alice, 'direct', ['bob']);
    const want = [];
    for (let i = 1; i <= 3; i++) {
      await send(alice, `a${i} before`);
      if (i === 1) await openChat(bob, chat); // bob learns of the chat from its first message
      await send(bob, `b${i} before`);
      want.push(`a${i} before`, `b${i} before`);
    }
    await waitBodies(alice, want);
    await waitBodies(bob, want);

    await control('/stop');
    await alice.waitForSelector('#conn[data-state="reconnecting"]', { timeout: WAIT });
    await bob.waitForSelector('#conn[data-state="reconnecting"]', { timeout: WAIT });
    await send(alice, 'a4 while down');
    await send(alice, 'a5 while down');
    await send(bob, 'b4 while down');
    want.push('a4 while down', 'a5 while down', 'b4 while down');
    await alice.waitForSelector('#message-list .msg.pending'); // queued, not lost
    await shot(alice, 'restart-down');

    const injected = ['c1 from another device', 'c2 from another device'];
    await control('/start', { send: { user: 'alice', device: 'go-test', chatId: chat, bodies: injected } });
    want.push(...injected);

    for (const [p, n] of [[alice, 'alice'], [bob, 'bob']]) {
      await connected(p);
      await waitBodies(p, want);
      await settled(p);
    }
    // The sends made while down were stored once each (idempotent resend).
    const stored = await history('alice', chat);
    assert.deepEqual(stored.map((m) => m.body).sort(), [...want].sort(), 'history holds each message once');
    const ids = stored.map((m) => m.messageId).sort();
    for (const [p, n] of [[alice, 'alice'], [bob, 'bob']]) {
      const counts = await assertNoDuplicates(p, n);
      assert.deepEqual(Object.keys(counts).sort(), ids, `${n}: rendered ids = history ids`);
    }

    // A reload recovers everything from history, once.
    await bob.reload();
    await connected(bob);
    await openChat(bob, chat);
    await waitBodies(bob, want);
    const counts = await assertNoDuplicates(bob, 'bob after reload');
    assert.deepEqual(Object.keys(counts).sort(), ids);
    await shot(bob, 'restart-recovered');
    clean(alice, 'alice');
    clean(bob, 'bob');
  },

  /** HTML in a body or a title is text: no element is made, no script runs. */
  async html_is_text(browser) {
    const payload = '<script>alert(1)</script><img src=x onerror=alert(2)>';
    const title = '<img src=y onerror=alert(3)><b>bold</b>';
    const alice = await signIn(browser, 'alice');
    const bob = await signIn(browser, 'bob');
    const chat = await createChat(alice, 'group', ['bob'], title);
    await send(alice, payload);
    await openChat(bob, chat);
    for (const [p, n] of [[alice, 'alice'], [bob, 'bob']]) {
      await waitBodies(p, [payload]);
      await settled(p);
      assert.equal(await p.textContent('#chat-title'), title, `${n}: title shown as text`);
      assert.equal(await p.textContent(`.chat-item[data-chat-id="${chat}"] .chat-name`), title);
      assert.equal(await p.textContent(`.chat-item[data-chat-id="${chat}"] .preview`), `alice: ${payload}`);
      const made = await p.$$eval('#app img, #app script, #app b', (els) => els.length);
      assert.equal(made, 0, `${n}: elements were created from user data`);
    }
    await bob.waitForTimeout(500); // give an injected handler every chance to fire
    await shot(bob, 'html_is_text');
    clean(alice, 'alice');
    clean(bob, 'bob');
  },

  /** Emoji, right-to-left scripts and long words display correctly. */
  async unicode(browser) {
    const alice = await signIn(browser, 'alice');
    const bob = await signIn(browser, 'bob');
    const chat = await createChat(alice, 'direct', ['bob']);
    const emoji = 'family 👨‍👩‍👧‍👦, wave 👋🏽, flag 🇺🇦, ok ✅';
    const hebrew = 'שלום עולם, מה שלומך?';
    const arabic = 'مرحبا بالعالم ١٢٣';
    const long = 'Donaudampfschifffahrtsgesellschaftskapitän'.repeat(12);
    const lines = 'line one\nline two';
    for (const b of [emoji, hebrew, arabic, long, lines]) await send(alice, b);
    await openChat(bob, chat);
    for (const [p, n] of [[alice, 'alice'], [bob, 'bob']]) {
      await waitBodies(p, [emoji, hebrew, arabic, long, lines]);
      // Measure the layout the page ends with, not one on the way there:
      // fonts loaded, every send answered (a pending bubble is replaced
      // once accepted) and, for alice, bob's receipt shown (the bubble it
      // sits under is replaced again, a line taller). Then the boxes must
      // hold still over two frames; a layout that never settles fails
      // below, with its geometry in the message.
      await p.evaluate(() => document.fonts.ready);
      await settled(p);
      if (p === alice) {
        await p.waitForFunction(() => [...document.querySelectorAll('#message-list .receipt')].some((r) => r.textContent === 'read by bob'), null, { timeout: WAIT });
      }
      const geometry = () => p.evaluate(() => JSON.stringify([...document.querySelectorAll('#messages, #message-list .msg')].map((e) => e.getBoundingClientRect())));
      for (let last = '', deadline = Date.now() + WAIT; Date.now() < deadline; ) {
        const now = await geometry();
        if (now === last) break;
        last = now;
        await p.evaluate(() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done))));
      }
      const info = await p.$$eval('#message-list .msg', (msgs) =>
        msgs.map((m) => {
          const b = m.querySelector('.body');
          const view = document.querySelector('#messages');
          const box = view.getBoundingClientRect();
          const r = m.getBoundingClientRect();
          return {
            text: b.textContent,
            dir: b.getAttribute('dir'),
            rtl: b.matches(':dir(rtl)'),
            overflow: b.scrollWidth - b.clientWidth,
            inside: r.left >= box.left - 1 && r.right <= box.right + 1,
            height: r.height,
            where:
              `box [${r.left.toFixed(1)}, ${r.right.toFixed(1)}] in #messages [${box.left.toFixed(1)}, ${box.right.toFixed(1)}] ` +
              `(scrollLeft ${view.scrollLeft}, scrollWidth ${view.scrollWidth}, clientWidth ${view.clientWidth}), class "${m.className}"`,
          };
        }),
      );
      const by = Object.fromEntries(info.map((i) => [i.text, i]));
      for (const t of [emoji, hebrew, arabic, long, lines]) assert.equal(by[t].dir, 'auto', `${n}: dir=auto`);
      assert.equal(by[hebrew].rtl, true, `${n}: Hebrew is right-to-left`);
      assert.equal(by[arabic].rtl, true, `${n}: Arabic is right-to-left`);
      assert.equal(by[emoji].rtl, false, `${n}: emoji text is left-to-right`);
      for (const i of info) {
        assert.ok(i.overflow <= 1, `${n}: body overflows by ${i.overflow}px: ${i.text.slice(0, 40)}`);
        assert.ok(i.inside, `${n}: message box leaves the view: ${JSON.stringify(i.text.slice(0, 40))}: ${i.where}`);
      }
      assert.ok(by[long].height > 3 * by[hebrew].height, `${n}: the long word wraps onto several lines`);
      // A ZWJ sequence and a skin-tone modifier each draw as one glyph
      // (with no emoji font they fall apart into several boxes).
      const widths = await p.$$eval(
        '#message-list .body',
        (els, [text, parts]) => {
          const node = els.find((e) => e.textContent === text).firstChild;
          const size = parseFloat(getComputedStyle(node.parentElement).fontSize);
          return parts.map((part) => {
            const r = document.createRange();
            const at = text.indexOf(part);
            r.setStart(node, at);
            r.setEnd(node, at + part.length);
            return r.getBoundingClientRect().width / size;
          });
        },
        [emoji, ['👨‍👩‍👧‍👦', '👋🏽', '🇺🇦']],
      );
      for (const w of widths) {
        assert.ok(w > 0.5 && w < 2, `${n}: an emoji is ${w.toFixed(2)} em wide, not one glyph (is fonts-noto-color-emoji installed?)`);
      }
      assert.ok(by[lines].height > by[hebrew].height, `${n}: line breaks are kept`);
    }
    await shot(bob, 'unicode');
    clean(alice, 'alice');
    clean(bob, 'bob');
  },

  /**
   * Long history: 1100 messages (three history pages of 500) sent from Go
   * before bob signs in. bob pages them all (unread count 1100), renders the
   * newest 50 and reveals older ones with "load older" and by scrolling up.
   */
  async long_history(browser) {
    const alice = await signIn(browser, 'alice');
    const chat = await createChat(alice, 'group', ['bob'], 'history');
    await alice.fill('#add-member-input', 'carol');
    await alice.press('#add-member-input', 'Enter');
    await alice.waitForFunction(() => document.querySelector('#chat-members').textContent.includes('carol'), null, { timeout: WAIT });
    const N = 1100;
    const all = Array.from({ length: N }, (_, i) => `m${String(i + 1).padStart(4, '0')}`);
    await control('/send', { user: 'carol', device: 'go-test', chatId: chat, bodies: all });

    const bob = await signIn(browser, 'bob');
    await bob.waitForSelector(`.chat-item[data-chat-id="${chat}"] .unread[data-unread="${N}"]`, { timeout: WAIT });
    await openChat(bob, chat);
    await bob.waitForFunction(() => document.querySelectorAll('#message-list .msg').length === 50, null, { timeout: WAIT });
    assert.equal((await bodies(bob)).length, 50, 'the newest 50 are rendered');
    assert.equal(await bob.isVisible('#load-older'), true);
    // A click through the DOM: playwright's click would first scroll the
    // button into view, and reaching the top loads older messages by itself.
    await bob.$eval('#load-older', (b) => b.click());
    await bob.waitForFunction(() => document.querySelectorAll('#message-list .msg').length === 100);
    await bob.$eval('#messages', (e) => e.scrollTo(0, 0));
    await bob.waitForFunction(() => document.querySelectorAll('#message-list .msg').length === 150);
    const committed = (await history('bob', chat)).map((m) => m.body);
    assert.equal(committed.length, N);
    assert.deepEqual(await bodies(bob), committed.slice(-150), 'the newest 150, in commit order');
    await assertNoDuplicates(bob, 'bob');

    // alice received the burst live (or recovered it after a withdrawal).
    await waitBodies(alice, all);
    await assertNoDuplicates(alice, 'alice');
    clean(alice, 'alice');
    clean(bob, 'bob');
  },

  /** A wrong token is refused on the sign-in page. */
  async bad_token(browser) {
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(BASE);
    await page.fill('#token-input', 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJtYWxsb3J5In0.c2lnbmF0dXJl');
    await page.click('#token-submit');
    await page.waitForFunction(() => document.querySelector('#signin-error').textContent.includes('refused'), null, { timeout: WAIT });
    assert.equal(await page.isVisible('#app'), false);
    assert.equal(await page.isVisible('[data-demo-user="alice"]'), true, 'the demo switch is shown');
    await shot(page, 'signin');
  },

  /**
   * Tokens live 4 s here (browser_test.go sets the demo token TTL). Signed in
   * with the demo switch, the page gets new tokens from the application (the
   * demo endpoint) and refreshes them on its open socket: one socket for the
   * whole scenario, never closed with 4005. Signed in with a pasted token,
   * which the page cannot renew, it is signed out when the token expires.
   */
  async token_refresh(browser) {
    const sockets = [];
    const watch = (page) =>
      page.on('websocket', (ws) => {
        const s = { refreshes: 0, closed: false };
        sockets.push(s);
        ws.on('framesent', (f) => {
          if (typeof f.payload === 'string' && f.payload.includes('"type":"refresh"')) s.refreshes++;
        });
        ws.on('close', () => (s.closed = true));
      });
    const t0 = Date.now();
    const alice = await signIn(browser, 'alice', 'demo', watch);
    const chat = await createChat(alice, 'direct', ['bob']);
    // Each refresh comes halfway through what is left of a 3-4 s token, so
    // at least 1.5 s apart: after three, the first token has expired.
    const deadline = Date.now() + WAIT;
    while (!(sockets[0]?.refreshes >= 3) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    assert.ok(sockets[0]?.refreshes >= 3, `refresh frames sent: ${sockets[0]?.refreshes}`);
    assert.ok(Date.now() - t0 > 4000, 'three refreshes within the first token\'s life');
    assert.equal(sockets.length, 1, 'the page opened another socket: the first one was closed');
    assert.equal(sockets[0].closed, false);
    assert.equal(await alice.getAttribute('#conn', 'data-state'), 'connected');
    await send(alice, 'sent with the fourth token');
    await waitBodies(alice, ['sent with the fourth token']);
    await settled(alice);
    assert.deepEqual((await history('alice', chat)).map((m) => m.body), ['sent with the fourth token']);

    const bob = await signIn(browser, 'bob', 'token');
    await bob.waitForFunction(() => document.querySelector('#signin-error').textContent.includes('expired'), null, { timeout: WAIT });
    assert.equal(await bob.isVisible('#app'), false, 'signed out when the pasted token expired');
    clean(alice, 'alice');
    clean(bob, 'bob');
  },

  /** The picture in the README (only when README_SHOT names a file). */
  async readme(browser) {
    if (!process.env.README_SHOT) return;
    const alice = await signIn(browser, 'alice');
    const bob = await signIn(browser, 'bob');
    const carol = await signIn(browser, 'carol');
    const team = await createChat(alice, 'group', ['bob', 'carol'], 'Launch 🚀');
    await send(alice, 'Morning! Build 1.4 is green, shall we ship?');
    await openChat(bob, team);
    await send(bob, 'Yes. Release notes are in the doc.');
    await openChat(carol, team);
    await send(carol, 'I will post the announcement 📣');
    await send(carol, 'مرحبا بالجميع، إصدار جديد!');
    const direct = await createChat(bob, 'direct', ['alice']);
    await send(bob, 'lunch after the release? 🍜');
    await waitBodies(alice, ['Yes. Release notes are in the doc.']);
    await createChat(alice, 'direct', ['carol']);
    await send(alice, 'thanks for the review!');
    await openChat(alice, team);
    await waitBodies(alice, ['مرحبا بالجميع، إصدار جديد!']);
    await alice.fill('#composer-input', 'Ship it ✅');
    await alice.waitForSelector(`.chat-item[data-chat-id="${direct}"] .unread`, { timeout: WAIT });
    await alice.waitForSelector('#message-list .receipt', { timeout: WAIT });
    await alice.setViewportSize({ width: 1100, height: 620 });
    await alice.screenshot({ path: process.env.README_SHOT });
  },
};

// ---- runner --------------------------------------------------------------

async function main() {
  assert.ok(BASE, 'TETRA_URL is not set');
  mkdirSync(SHOTS, { recursive: true });
  const names = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(scenarios);
  let failed = 0;
  for (const name of names) {
    const fn = scenarios[name];
    if (!fn) {
      console.error(`unknown scenario ${name}; have: ${Object.keys(scenarios).join(' ')}`);
      failed++;
      continue;
    }
    for (const f of readdirSync(SHOTS, { withFileTypes: true })) {
      if (f.name.startsWith(`FAIL-${name}-`)) rmSync(SHOTS + f.name);
    }
    const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: FLAGS });
    const t0 = Date.now();
    try {
      await fn(browser);
      console.log(`ok   ${name} (${Date.now() - t0} ms)`);
    } catch (err) {
      failed++;
      console.log(`FAIL ${name} (${Date.now() - t0} ms): ${err.stack || err}`);
      for (const [c, ctx] of browser.contexts().entries()) {
        for (const [i, p] of ctx.pages().entries()) {
          await shot(p, `FAIL-${name}-${c}-${i}`).catch(() => {});
          const state = await p
            .evaluate(() => ({
              me: document.querySelector('#me')?.textContent,
              conn: document.querySelector('#conn')?.textContent,
              visibility: document.visibilityState,
              chats: [...document.querySelectorAll('.chat-item')].map((e) => e.dataset.chatId),
              open: document.querySelector('#chat-title')?.textContent,
              messages: document.querySelectorAll('#message-list .msg').length,
            }))
            .catch((e) => e.message);
          console.log(`  page ${c}-${i}: ${JSON.stringify(state)}`);
          for (const l of (p.logs || []).slice(-15)) console.log(`    console ${l}`);
        }
      }
    } finally {
      await browser.close();
    }
  }
  process.exit(failed ? 1 : 0);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
