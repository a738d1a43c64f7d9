// Unit tests of workload/web/static/client.js under node:test, with fetch and
// the socket faked: the rules a browser run cannot pin down reliably (the
// cursor moves only with history pages, paging follows hasMore, resends keep
// their correlationId). Run: node --test client.test.mjs (browser_test.go does).

import { test, beforeEach } from 'node:test';
import assert from 'node:assert/strict';

// The few browser globals client.js touches.
globalThis.location = { href: 'http://tetra.test/' };
globalThis.WebSocket = class {
  static OPEN = 1;
  constructor(url) {
    dialed.push(new URL(url));
  }
  close() {}
};
const dialed = []; // URLs of the sockets client.js opened
globalThis.addEventListener = () => {};
globalThis.removeEventListener = () => {};

const { Client, State, backoff, refreshDelay, tokenExp } = await import('../../workload/web/static/client.js');

// A token whose sub is alice (the signature is not checked client-side).
const b64 = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
const TOKEN = `${b64({ alg: 'HS256' })}.${b64({ sub: 'alice' })}.sig`;

let requests; // URLs fetched
let pages; // chatId -> queue of history pages to answer
let sent; // frames written to the socket

beforeEach(() => {
  requests = [];
  pages = new Map();
  sent = [];
  globalThis.fetch = async (url) => {
    const u = new URL(url, 'http://tetra.test/');
    requests.push(u);
    let body;
    if (u.pathname === '/api/chats') body = { chats: [{ chatId: 'c1', kind: 'direct', title: '', members: ['alice', 'bob'] }] };
    else body = pages.get(u.pathname.split('/')[3])?.shift() ?? { messages: [], hasMore: false };
    return { ok: true, status: 200, json: async () => body };
  };
});

function storage() {
  const m = new Map();
  return { getItem: (k) => m.get(k) ?? null, setItem: (k, v) => m.set(k, v), removeItem: (k) => m.delete(k), m };
}

// connected returns a client as if hello had just arrived on a fresh socket.
function connected(store = storage()) {
  const c = new Client({ token: TOKEN, device: 'web-test', storage: store });
  c.stopped = false;
  c.ws = { readyState: 1, send: (s) => sent.push(JSON.parse(s)), close() {} };
  c.onHello({ type: 'hello', userId: 'alice', limits: { maxInFlightSends: 2, pingIntervalMs: 60000 } }, c.gen, () => Date.now());
  return c;
}

const msg = (id, body = id, extra = {}) => ({ messageId: id, chatId: 'c1', senderId: 'bob', body, sentAt: '2026-01-01T00:00:00Z', ...extra });
const flush = () => new Promise((r) => setTimeout(r, 5));

test('the cursor moves only with history pages, never with live frames', async () => {
  pages.set('c1', [{ messages: [msg('m1'), msg('m2')], hasMore: false }]);
  const c = connected();
  await flush();
  await c.loadLatest('c1');
  assert.equal(c.log('c1').cursor, 'm2');

  // m4 arrives live before m3 (a redelivery, or the fast path after a shed).
  c.onFrame({ type: 'message', ...msg('m4') });
  c.onFrame({ type: 'message', ...msg('m4') }); // and twice
  assert.equal(c.log('c1').cursor, 'm2', 'a live frame must not move the cursor');
  await flush();
  assert.deepEqual(sent.filter((f) => f.type === 'ack').flatMap((f) => f.messageIds), ['m4', 'm4'], 'every frame is acked, duplicates too');

  // The next sync pages from m2 and finds m3 and m4 in commit order.
  pages.set('c1', [{ messages: [msg('m3'), msg('m4')], hasMore: false }]);
  await c.syncChat('c1', c.gen);
  assert.equal(requests.at(-1).searchParams.get('since'), 'm2');
  assert.deepEqual(c.messages('c1').map((m) => m.messageId), ['m1', 'm2', 'm3', 'm4'], 'deduplicated, in commit order');
  assert.equal(c.log('c1').cursor, 'm4');
  c.stop();
});

test('hello fetches no history; a chat opens with one before=end request; older pages go in front', async () => {
  const c = connected();
  await flush();
  assert.deepEqual(requests.filter((u) => u.pathname.endsWith('/messages')), [], 'no history before a chat is opened');
  pages.set('c1', [
    { messages: [msg('m3'), msg('m4')], hasMore: true },
    { messages: [msg('m1'), msg('m2')], hasMore: false },
  ]);
  await c.loadLatest('c1');
  await c.loadLatest('c1'); // held: no second request
  let hist = requests.filter((u) => u.pathname.endsWith('/messages'));
  assert.deepEqual(hist.map((u) => [u.searchParams.get('before'), u.searchParams.get('limit')]), [['end', '50']]);
  assert.equal(c.hasOlder('c1'), true);
  c.onFrame({ type: 'message', ...msg('m5') }); // live, after the page
  assert.equal(await c.loadOlder('c1'), false);
  hist = requests.filter((u) => u.pathname.endsWith('/messages'));
  assert.equal(hist.at(-1).searchParams.get('before'), 'm3');
  assert.deepEqual(c.messages('c1').map((m) => m.messageId), ['m1', 'm2', 'm3', 'm4', 'm5']);
  assert.equal(c.hasOlder('c1'), false);
  assert.equal(await c.loadOlder('c1'), false);
  assert.equal(requests.filter((u) => u.pathname.endsWith('/messages')).length, 2, 'nothing older: no request');
  c.stop();
});

test('catch-ups of a held chat page forward with limit=500 while hasMore', async () => {
  pages.set('c1', [
    { messages: [msg('m1'), msg('m2')], hasMore: false },
    { messages: [msg('m3')], hasMore: true },
    { messages: [msg('m4')], hasMore: false },
  ]);
  const c = connected();
  await flush();
  await c.loadLatest('c1');
  await c.syncChat('c1', c.gen);
  const hist = requests.filter((u) => u.pathname.endsWith('/messages')).slice(1);
  assert.deepEqual(hist.map((u) => u.searchParams.get('since')), ['m2', 'm3']);
  assert.ok(hist.every((u) => u.searchParams.get('limit') === '500'));
  assert.equal(c.messages('c1').length, 4);
  c.stop();
});

test('the chat list follows nextCursor', async () => {
  const base = globalThis.fetch;
  globalThis.fetch = async (url, opts) => {
    const u = new URL(url, 'http://tetra.test/');
    if (u.pathname !== '/api/chats') return base(url, opts);
    requests.push(u);
    const body = u.searchParams.get('cursor') === 'k1'
      ? { chats: [{ chatId: 'c2', kind: 'direct', members: ['alice', 'carol'] }] }
      : { chats: [{ chatId: 'c1', kind: 'direct', members: ['alice', 'bob'] }], nextCursor: 'k1' };
    return { ok: true, status: 200, json: async () => body };
  };
  const c = connected();
  await flush();
  assert.deepEqual([...c.chats.keys()], ['c1', 'c2']);
  c.stop();
});

test('edits and deletes change their original, in history and live, and are not messages', async () => {
  pages.set('c1', [
    {
      messages: [
        msg('m1', 'new text', { editedAt: '2026-01-01T00:01:00Z' }),
        { messageId: 'm2', chatId: 'c1', senderId: 'bob', body: '', deleted: true, sentAt: '2026-01-01T00:00:00Z' },
        msg('m3', 'new text', { edits: 'm1' }),
        msg('m4', '', { deletes: 'm2' }),
        msg('m5', 'plain'),
      ],
      hasMore: false,
    },
  ]);
  const c = connected();
  await flush();
  await c.loadLatest('c1');
  assert.deepEqual(c.messages('c1').map((m) => [m.messageId, m.body, !!m.editedAt, !!m.deleted]), [
    ['m1', 'new text', true, false],
    ['m2', '', false, true],
    ['m5', 'plain', false, false],
  ]);
  c.onFrame({ type: 'message', ...msg('m6', 'plain, fixed', { edits: 'm5', sentAt: '2026-01-01T00:02:00Z' }) });
  assert.equal(c.messages('c1').at(-1).body, 'plain, fixed');
  assert.equal(c.messages('c1').at(-1).editedAt, '2026-01-01T00:02:00Z');
  c.onFrame({ type: 'message', ...msg('m7', '', { deletes: 'm5' }) });
  assert.equal(c.messages('c1').at(-1).deleted, true);
  assert.equal(c.messages('c1').at(-1).body, '');
  c.onFrame({ type: 'message', ...msg('m8', 'too late', { edits: 'm5' }) }); // a deleted message stays deleted
  assert.equal(c.messages('c1').at(-1).body, '');
  assert.equal(c.messages('c1').length, 3);
  c.stop();
});

test('an own edit is a send with edits, resent until accepted', async () => {
  pages.set('c1', [{ messages: [msg('m1', 'teh plan', { senderId: 'alice' })], hasMore: false }]);
  const c = connected();
  await flush();
  await c.loadLatest('c1');
  c.edit('c1', 'm1', 'the plan');
  assert.equal(c.messages('c1')[0].body, 'the plan');
  const f = sent.find((x) => x.type === 'send');
  assert.equal(f.edits, 'm1');
  assert.equal(f.body, 'the plan');
  assert.equal(c.messages('c1').length, 1, 'an edit adds no message');
  c.onFrame({ type: 'accepted', chatId: 'c1', correlationId: f.correlationId, messageId: 'm2' });
  assert.equal(c.outbox.length, 0);
  c.stop();
});

test('typing: at most one frame every 2 s; shown for 5 s after the last one', async () => {
  const c = connected();
  await flush();
  c.typing('c1');
  c.typing('c1');
  assert.deepEqual(sent.filter((f) => f.type === 'typing'), [{ type: 'typing', chatId: 'c1' }]);
  c.onFrame({ type: 'typing', chatId: 'c1', userId: 'bob' });
  c.onFrame({ type: 'typing', chatId: 'c1', userId: 'alice' }); // own: not shown
  assert.deepEqual(c.typingIn('c1'), ['bob']);
  assert.deepEqual(c.typingIn('c1', Date.now() + 5100), []);
  c.onFrame({ type: 'typing', chatId: 'c1', userId: 'bob' });
  c.onFrame({ type: 'message', ...msg('m9') }); // bob sent: he types no more
  assert.deepEqual(c.typingIn('c1'), []);
  c.onFrame({ type: 'presence', userId: 'bob', online: false, lastSeen: '2026-01-01T10:00:00Z' });
  assert.deepEqual(c.presence.get('bob'), { online: false, lastSeen: '2026-01-01T10:00:00Z' });
  c.stop();
});

test('a send keeps its correlationId across reconnects until accepted', async () => {
  const store = storage();
  const c = connected(store);
  await flush();
  const m = c.send('c1', 'hello');
  const first = sent.find((f) => f.type === 'send');
  assert.equal(first.correlationId, m.correlationId);
  assert.match(store.m.get('tetra.outbox.alice'), /hello/, 'the queue survives a reload');

  // The socket drops before the answer; the next hello resends the same frame.
  c.onClose(1006, '', true);
  clearTimeout(c.timer);
  sent = [];
  c.ws = { readyState: 1, send: (s) => sent.push(JSON.parse(s)), close() {} };
  c.onHello({ type: 'hello', userId: 'alice', limits: {} }, c.gen, () => Date.now());
  const again = sent.find((f) => f.type === 'send');
  assert.deepEqual(again, first);

  c.onFrame({ type: 'accepted', correlationId: m.correlationId, messageId: 'm9', chatId: 'c1', sentAt: '2026-01-01T00:00:01Z' });
  assert.equal(m.messageId, 'm9');
  assert.equal(m.status, 'sent');
  assert.deepEqual(c.outbox, []);
  assert.equal(store.m.get('tetra.outbox.alice'), '[]');
  c.stop();
});

test('a history page settles an own send whose accepted was lost', async () => {
  const c = connected();
  await flush();
  const m = c.send('c1', 'hi');
  pages.set('c1', [{ messages: [msg('m7', 'hi', { senderId: 'alice', correlationId: m.correlationId })], hasMore: false }]);
  await c.syncChat('c1', c.gen);
  assert.equal(m.messageId, 'm7');
  assert.deepEqual(c.outbox, []);
  assert.equal(c.messages('c1').length, 1, 'shown once');
  c.stop();
});

test('credits: at most maxInFlightSends unanswered sends; refusals', async () => {
  const c = connected();
  await flush();
  const a = c.send('c1', 'a');
  const b = c.send('c1', 'b');
  const d = c.send('c1', 'c');
  assert.equal(sent.filter((f) => f.type === 'send').length, 2, 'hello said maxInFlightSends=2');
  c.onFrame({ type: 'error', correlationId: a.correlationId, code: 'forbidden', message: 'not a member' });
  assert.equal(a.status, 'failed');
  assert.equal(sent.filter((f) => f.type === 'send').length, 3, 'a credit came back');
  c.onFrame({ type: 'error', correlationId: b.correlationId, code: 'overloaded', message: 'busy' });
  assert.equal(b.status, 'pending', 'overloaded is retried later');
  assert.equal(c.outbox.length, 2);
  assert.equal(d.status, 'pending');
  c.stop();
});

test('read receipts only move forward', async () => {
  pages.set('c1', [{ messages: [msg('m1'), msg('m2')], hasMore: false }]);
  const c = connected();
  await flush();
  c.onFrame({ type: 'read', chatId: 'c1', userId: 'bob', messageId: 'm2' });
  c.onFrame({ type: 'read', chatId: 'c1', userId: 'bob', messageId: 'm1' });
  assert.equal(c.reads('c1').get('bob'), 'm2');
  c.read('c1', 'm2');
  assert.deepEqual(sent.at(-1), { type: 'read', chatId: 'c1', messageId: 'm2' });
  assert.equal(c.state, State.CONNECTED);
  c.stop();
});

test('backoff doubles, is capped, and is jittered', () => {
  for (let attempt = 0; attempt < 10; attempt++) {
    const nominal = Math.min(10000, 250 * 2 ** attempt);
    for (let i = 0; i < 50; i++) {
      const d = backoff(attempt);
      assert.ok(d >= nominal / 2 && d <= nominal, `attempt ${attempt}: ${d}`);
    }
  }
});

// A token of alice that expires at exp (ms since the epoch).
const expiring = (exp, sub = 'alice') => `${b64({ alg: 'HS256' })}.${b64({ sub, exp: exp / 1000 })}.sig`;
const until = async (cond, what) => {
  for (let i = 0; i < 400 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
  assert.ok(cond(), `timed out waiting for ${what}`);
};

test('refresh is due 30 s before exp, or halfway for a shorter token', () => {
  const now = 1_000_000;
  assert.equal(refreshDelay(now + 180_000, now), 150_000);
  assert.equal(refreshDelay(now + 3_000, now), 1_500);
  assert.equal(refreshDelay(now - 1, now), 0);
  assert.equal(tokenExp(expiring(now + 5000)), now + 5000);
  assert.equal(tokenExp(TOKEN), 0, 'no exp: never refreshed');
});

test('the token is refreshed on the open socket before exp', async () => {
  let calls = 0;
  const next = expiring(Date.now() + 3_600_000);
  const c = new Client({ token: expiring(Date.now() + 300), device: 'web-test', storage: storage(), refreshToken: async () => (calls++, next) });
  const tokens = [];
  c.addEventListener('token', (e) => tokens.push(e.detail.token));
  c.stopped = false;
  c.ws = { readyState: 1, send: (s) => sent.push(JSON.parse(s)), close() {} };
  c.onHello({ type: 'hello', userId: 'alice', limits: { pingIntervalMs: 60000 } }, c.gen, () => Date.now());
  await until(() => sent.some((f) => f.type === 'refresh'), 'a refresh frame');
  assert.deepEqual(sent.find((f) => f.type === 'refresh'), { type: 'refresh', token: next });
  assert.equal(calls, 1, 'one refresh for an hour-long token');
  assert.equal(c.token, next, 'later calls use the new token');
  assert.deepEqual(tokens, [next]);
  c.stop();
});

test('a refreshed token of another user is refused', async () => {
  const c = new Client({ token: expiring(Date.now() + 100), device: 'web-test', storage: storage(), refreshToken: async () => expiring(Date.now() + 3_600_000, 'mallory') });
  c.stopped = false;
  c.ws = { readyState: 1, send: (s) => sent.push(JSON.parse(s)), close() {} };
  c.onHello({ type: 'hello', userId: 'alice', limits: { pingIntervalMs: 60000 } }, c.gen, () => Date.now());
  const mine = c.token;
  await new Promise((r) => setTimeout(r, 150)); // the refresh was due after ~50 ms
  assert.ok(!sent.some((f) => f.type === 'refresh'), 'no refresh frame with a foreign token');
  assert.equal(c.token, mine, 'the foreign token is not used');
  c.stop();
});

test('close 4005: a new token before reconnecting, or sign-in again', async () => {
  const fresh = expiring(Date.now() + 3_600_000);
  const c = new Client({ token: expiring(Date.now() + 1000), device: 'web-test', storage: storage(), refreshToken: async () => fresh });
  c.stopped = false;
  dialed.length = 0;
  c.onClose(4005, 'token expired', true);
  clearTimeout(c.timer);
  c.connect();
  await until(() => dialed.length > 0, 'a reconnect');
  assert.equal(dialed[0].searchParams.get('token'), fresh, 'the reconnect dials with the new token');
  c.stop();

  const lone = new Client({ token: expiring(Date.now() + 1000), device: 'web-test', storage: storage() });
  let why = null;
  lone.addEventListener('unauthorized', (e) => (why = e.detail));
  lone.stopped = false;
  lone.onClose(4005, 'token expired', true);
  assert.deepEqual(why, { expired: true });
  assert.equal(lone.stopped, true, 'no reconnect with an expired token and no way to renew it');
});

// listing answers GET /api/chats with chats (the other paths as before).
function listing(chats) {
  const base = globalThis.fetch;
  globalThis.fetch = async (url, opts) => {
    const u = new URL(url, 'http://tetra.test/');
    if (u.pathname !== '/api/chats' || (opts?.method && opts.method !== 'GET')) return base(url, opts);
    requests.push(u);
    return { ok: true, status: 200, json: async () => ({ chats: chats() }) };
  };
}

test('read markers come with the listing, move forward only, and unread counts from this user\'s', async () => {
  listing(() => [{ chatId: 'c1', kind: 'direct', members: ['alice', 'bob'], lastRead: { alice: 'm2', bob: 'm1' }, unread: 2 }]);
  pages.set('c1', [{ messages: [msg('m1'), msg('m2'), msg('m3'), msg('m4')], hasMore: false }]);
  const c = connected();
  await flush();
  assert.equal(c.unread('c1'), 2, 'the server\'s count before the chat is opened');
  await c.loadLatest('c1');
  assert.equal(c.unread('c1'), 2, 'm3 and m4 come after alice\'s marker');
  assert.equal(c.reads('c1').get('bob'), 'm1');

  c.onFrame({ type: 'read', chatId: 'c1', userId: 'bob', messageId: 'm3' });
  c.onFrame({ type: 'read', chatId: 'c1', userId: 'bob', messageId: 'm2' }); // late, older: ignored
  assert.equal(c.reads('c1').get('bob'), 'm3');

  // A read on alice's other device clears the count here.
  c.onFrame({ type: 'read', chatId: 'c1', userId: 'alice', messageId: 'm4' });
  assert.equal(c.unread('c1'), 0);

  // Reading what is already read sends nothing; reading further sends once.
  sent = [];
  c.read('c1', 'm3');
  c.onFrame({ type: 'message', ...msg('m5') });
  assert.equal(c.unread('c1'), 1);
  c.read('c1', 'm5');
  c.read('c1', 'm5');
  assert.deepEqual(sent.filter((f) => f.type === 'read'), [{ type: 'read', chatId: 'c1', messageId: 'm5' }]);
  assert.equal(c.unread('c1'), 0);

  // A listing with an older marker (fetched before the read) moves nothing back.
  c.setChats([{ chatId: 'c1', kind: 'direct', members: ['alice', 'bob'], lastRead: { alice: 'm2' }, unread: 3 }]);
  assert.equal(c.reads('c1').get('alice'), 'm5');

  // Until a chat's history is loaded, its count is the server's.
  c.setChats([{ chatId: 'c9', kind: 'direct', members: ['alice', 'carol'], lastRead: { alice: 'q1' }, unread: 7 }]);
  assert.equal(c.unread('c9'), 7);
  c.stop();
});

test('chat events add, update and remove chats; a full listing drops what it no longer lists', async () => {
  let listed = [{ chatId: 'c1', kind: 'direct', members: ['alice', 'bob'] }];
  listing(() => listed);
  const c = connected();
  await flush();
  const removed = [];
  c.addEventListener('removed', (e) => removed.push(e.detail));

  const g = { chatId: 'g1', kind: 'group', title: 'Team', members: ['alice', 'bob'], createdBy: 'bob' };
  pages.set('g1', [{ messages: [msg('x1', 'earlier', { chatId: 'g1' })], hasMore: false }]);
  c.onFrame({ type: 'chat', event: 'added', chat: g });
  assert.equal(c.chats.get('g1').title, 'Team');
  await flush();
  assert.deepEqual(c.messages('g1').map((m) => m.body), ['earlier'], 'an added chat syncs its history');

  c.onFrame({ type: 'chat', event: 'updated', chat: { ...g, members: ['alice', 'bob', 'carol'] } });
  assert.deepEqual(c.chats.get('g1').members, ['alice', 'bob', 'carol']);

  c.onFrame({ type: 'chat', event: 'removed', chat: { ...g, members: ['bob', 'carol'] } });
  assert.equal(c.chats.has('g1'), false);
  assert.deepEqual(removed.map((r) => [r.chat.chatId, r.why]), [['g1', 'removed']]);

  // Removed while this client did not listen: the next full listing notices.
  c.onFrame({ type: 'chat', event: 'added', chat: { ...g, chatId: 'g2' } });
  await flush();
  listed = [{ chatId: 'c1', kind: 'direct', members: ['alice', 'bob'] }];
  await c.refreshChats();
  assert.deepEqual([...c.chats.keys()], ['c1']);
  assert.deepEqual(removed.map((r) => r.chat.chatId), ['g1', 'g2']);
  c.stop();
});

test('leave sends DELETE and forgets the chat, even when its removed event comes first', async () => {
  listing(() => [{ chatId: 'g1', kind: 'group', members: ['alice', 'bob'], createdBy: 'bob' }]);
  const c = connected();
  await flush();
  const base = globalThis.fetch;
  let deleted = '';
  globalThis.fetch = async (url, opts) => {
    if (opts?.method !== 'DELETE') return base(url, opts);
    deleted = new URL(url, 'http://tetra.test/').pathname;
    // The server's event reaches the socket before the answer.
    c.onFrame({ type: 'chat', event: 'removed', chat: { chatId: 'g1', kind: 'group', members: ['bob'] } });
    return { ok: true, status: 200, json: async () => ({ chatId: 'g1', kind: 'group', members: ['bob'] }) };
  };
  const why = [];
  c.addEventListener('removed', (e) => why.push(e.detail.why));
  await c.leave('g1');
  assert.equal(deleted, '/api/chats/g1/members/alice');
  assert.equal(c.chats.has('g1'), false);
  assert.deepEqual(why, ['left']);
  c.stop();
});

test('a listing older than an event does not undo it', async () => {
  const g = { chatId: 'g1', kind: 'group', members: ['alice', 'bob'], createdBy: 'bob' };
  let release;
  let listed = [{ chatId: 'c1', kind: 'direct', members: ['alice', 'bob'] }];
  listing(() => listed);
  const c = connected();
  await flush();
  // A listing is on its way while alice is added to g1: it does not know g1.
  const base = globalThis.fetch;
  globalThis.fetch = async (url, opts) => {
    const u = new URL(url, 'http://tetra.test/');
    if (u.pathname === '/api/chats') await new Promise((r) => (release = r));
    return base(url, opts);
  };
  const slow = c.refreshChats();
  await flush();
  c.onFrame({ type: 'chat', event: 'added', chat: g });
  release();
  await slow;
  assert.ok(c.chats.has('g1'), 'the added chat stays');

  // The other way round: a listing still naming g1 after alice left it.
  listed = [{ chatId: 'c1', kind: 'direct', members: ['alice', 'bob'] }, g];
  const again = c.refreshChats();
  await flush();
  c.onFrame({ type: 'chat', event: 'removed', chat: { ...g, members: ['bob'] } });
  release();
  await again;
  assert.equal(c.chats.has('g1'), false, 'the removed chat does not come back');

  // A listing requested after the change is believed again.
  globalThis.fetch = base;
  await c.refreshChats();
  assert.ok(c.chats.has('g1'));
  c.stop();
});
