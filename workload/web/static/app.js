// app.js: the page. Sign-in (paste a token, or the demo switch when the
// server runs with --demo), the chat list, the message view and the composer.
// The contract itself (connection, resync, dedupe, acks, resends) lives in
// client.js.
//
// Every piece of user data (bodies, names, titles) reaches the page through
// textContent or an attribute value, never through innerHTML.

import { Client, State, api, tokenUser } from './client.js';

const TOKEN_KEY = 'tetra.token';
const DEMO_USER_KEY = 'tetra.demoUser'; // set when signed in with the demo switch: tokens can be renewed
const DEVICE_KEY = 'tetra.device';
const PAGE = 50; // messages rendered when a chat opens; "load older" reveals PAGE more

const $ = (id) => document.getElementById(id);

/** el builds an element with attributes and text or child nodes. */
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children) e.append(c); // strings become text nodes
  return e;
}

/**
 * reconcile makes parent's children the elements of items, in order, reusing
 * the element cached under each key while its signature is unchanged. Nodes
 * that did not change stay in place, so a render during a click, a text
 * selection or a scroll does not disturb it.
 */
function reconcile(parent, items, cache) {
  let prev = null;
  const next = () => (prev ? prev.nextElementSibling : parent.firstElementChild);
  for (const { key, sig, build } of items) {
    let c = cache.get(key);
    if (!c || c.sig !== sig) {
      const fresh = build();
      c?.el.replaceWith(fresh);
      c = { el: fresh, sig };
      cache.set(key, c);
    }
    if (next() !== c.el) parent.insertBefore(c.el, next());
    prev = c.el;
  }
  while (next()) next().remove();
}
const chatEls = new Map(); // chatId -> {el, sig}
const messageEls = new WeakMap(); // message object (client.js keeps one per message) -> {el, sig}

let client = null;
let openChat = ''; // chatId of the open chat
let shown = PAGE; // how many of the open chat's newest messages are rendered
let renderedLen = 0; // the open chat's message count at the last render
let renderQueued = false;

// ---- sign-in -------------------------------------------------------------

function showSignin(error = '') {
  $('app').hidden = true;
  $('signin').hidden = false;
  $('signin-error').textContent = error;
  document.title = 'tetra';
  loadDemo();
}

async function loadDemo() {
  const res = await fetch('/demo/users', { cache: 'no-store' }).catch(() => null);
  if (!res?.ok) return; // 404: the demo is off
  const { users } = await res.json();
  const box = $('demo-users');
  box.replaceChildren(
    ...users.map((u) => {
      const b = el('button', { type: 'button', 'data-demo-user': u }, `Sign in as ${u}`);
      b.addEventListener('click', () => demoSignin(u));
      return b;
    }),
  );
  $('demo').hidden = false;
}

/** demoToken mints a demo token for user (POST /demo/token, --demo only). */
async function demoToken(user) {
  const res = await fetch('/demo/token', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ user }),
  });
  if (!res.ok) throw new Error(`demo token: HTTP ${res.status}`);
  return (await res.json()).token;
}

async function demoSignin(user) {
  try {
    await signin(await demoToken(user), user);
  } catch (err) {
    $('signin-error').textContent = String(err.message || err);
  }
}

// The page is an application embedding the messenger: it supplies new tokens
// when the current one nears its exp (client.js refreshToken). With the demo
// switch it mints them like the first one; a pasted token cannot be renewed
// here, so when it expires the page asks to sign in again.
function tokenSource(demoUser) {
  return demoUser ? () => demoToken(demoUser) : null;
}

async function signin(token, demoUser = '') {
  token = token.trim();
  if (!tokenUser(token)) {
    $('signin-error').textContent = 'That is not a token (a JWT has three dot-separated parts).';
    return;
  }
  try {
    await api(token, 'GET', '/api/chats');
  } catch (err) {
    $('signin-error').textContent =
      err.status === 401 ? 'The server refused this token (expired, or signed with another secret).' : String(err.message);
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  if (demoUser) sessionStorage.setItem(DEMO_USER_KEY, demoUser);
  else sessionStorage.removeItem(DEMO_USER_KEY);
  startApp(token, demoUser);
}

function signout(error = '') {
  client?.stop('signed out');
  client?.forget();
  client = null;
  openChat = '';
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(DEMO_USER_KEY);
  showSignin(error);
}

// One device id per tab, so two tabs of one user do not supersede each other
// (close 4001). It lives in sessionStorage, like the token.
function deviceId() {
  let d = sessionStorage.getItem(DEVICE_KEY);
  if (!d) sessionStorage.setItem(DEVICE_KEY, (d = `web-${crypto.randomUUID().slice(0, 8)}`));
  return d;
}

// ---- the application -----------------------------------------------------

function startApp(token, demoUser = '') {
  $('signin').hidden = true;
  $('app').hidden = false;
  client = new Client({ token, device: deviceId(), refreshToken: tokenSource(demoUser) });
  client.addEventListener('token', (e) => sessionStorage.setItem(TOKEN_KEY, e.detail.token)); // a reload uses it
  $('me').textContent = client.user;
  client.addEventListener('state', (e) => showState(e.detail));
  client.addEventListener('hello', (e) => ($('me').textContent = e.detail.hello.userId));
  client.addEventListener('chats', scheduleRender);
  client.addEventListener('messages', scheduleRender);
  client.addEventListener('read', scheduleRender);
  client.addEventListener('unauthorized', (e) =>
    signout(e.detail.expired ? 'The token expired; sign in again.' : 'The server refused the token; sign in again.'),
  );
  client.start();
  render();
}

function showState({ state, retryInMs, reason }) {
  const c = $('conn');
  c.dataset.state = state;
  if (state === State.RECONNECTING) c.textContent = `reconnecting (${Math.ceil((retryInMs || 0) / 1000)}s)`;
  else c.textContent = state;
  c.title = reason || '';
  if (state === State.OFFLINE && reason) $('chat-error').textContent = `Offline: ${reason}.`;
  else if (state === State.CONNECTED) $('chat-error').textContent = '';
}

// Renders are coalesced: a history page of 500 messages is one render. A
// timer rather than requestAnimationFrame, which stops in background tabs:
// their title (the unread count) must stay current.
function scheduleRender() {
  if (renderQueued) return;
  renderQueued = true;
  setTimeout(() => {
    renderQueued = false;
    render();
  }, 10);
}

function render() {
  if (!client) return;
  renderChats();
  renderOpenChat();
  markRead();
}

// ---- read state (local) and unread counts --------------------------------

// The newest message this user has seen per chat, kept in localStorage so
// unread counts survive a reload. (The server keeps read receipts but the
// API does not return them.)
function lastReadKey(chatId) {
  return `tetra.lastRead.${client.user}.${chatId}`;
}

function unread(chatId) {
  const msgs = client.messages(chatId);
  const last = localStorage.getItem(lastReadKey(chatId));
  let i = last ? msgs.findIndex((m) => m.messageId === last) : -1;
  let n = 0;
  for (i += 1; i < msgs.length; i++) if (msgs[i].senderId !== client.user) n++;
  return n;
}

function atBottom() {
  const box = $('messages');
  return box.scrollHeight - box.scrollTop - box.clientHeight < 40;
}

// markRead: when the open chat is on screen and scrolled to its end, the
// newest message there is read. The receipt names the newest message from
// another member (a receipt for one's own message tells nobody anything).
function markRead() {
  if (!openChat || document.visibilityState !== 'visible' || !atBottom()) return;
  const msgs = client.messages(openChat).filter((m) => m.messageId);
  if (!msgs.length) return;
  const key = lastReadKey(openChat);
  if (localStorage.getItem(key) !== msgs.at(-1).messageId) {
    localStorage.setItem(key, msgs.at(-1).messageId);
    scheduleRender();
  }
  const theirs = msgs.filter((m) => m.senderId !== client.user).at(-1);
  if (theirs && theirs.messageId !== readSent.get(openChat)) {
    readSent.set(openChat, theirs.messageId);
    client.read(openChat, theirs.messageId);
  }
}
const readSent = new Map(); // chatId -> messageId of the last receipt sent

// ---- chat list -----------------------------------------------------------

function chatTitle(chat) {
  if (chat.kind === 'group') return chat.title || chat.members.join(', ');
  return chat.members.find((m) => m !== client.user) || client.user;
}

function lastActivity(chatId) {
  const m = client.messages(chatId).at(-1);
  return m ? m.sentAt : '';
}

function renderChats() {
  const chats = [...client.chats.values()].sort(
    (a, b) => lastActivity(b.chatId).localeCompare(lastActivity(a.chatId)) || chatTitle(a).localeCompare(chatTitle(b)),
  );
  let total = 0;
  const items = chats.map((chat) => {
    const n = chat.chatId === openChat && atBottom() ? 0 : unread(chat.chatId);
    total += n;
    const last = client.messages(chat.chatId).at(-1);
    const title = chatTitle(chat);
    const preview = last ? `${last.senderId}: ${last.body}` : 'no messages yet';
    const current = chat.chatId === openChat;
    return {
      key: chat.chatId,
      sig: JSON.stringify([title, chat.kind, n, preview, current]),
      build: () => {
        const b = el(
          'button',
          { type: 'button', class: 'chat-item', 'data-chat-id': chat.chatId, 'aria-current': current ? 'true' : false },
          el('span', { class: 'chat-name', dir: 'auto' }, title),
          el('span', { class: 'chat-kind' }, chat.kind),
          n ? el('span', { class: 'unread', 'data-unread': String(n) }, String(n)) : '',
          el('span', { class: 'preview', dir: 'auto' }, preview),
        );
        b.addEventListener('click', () => open(chat.chatId));
        return el('li', {}, b);
      },
    };
  });
  reconcile($('chats'), items, chatEls);
  document.title = `${total ? `(${total}) ` : ''}tetra · ${client.user}`;
}

// ---- message view --------------------------------------------------------

function open(chatId) {
  openChat = chatId;
  shown = PAGE;
  renderedLen = 0;
  $('chat-error').textContent = '';
  render();
  $('messages').scrollTop = $('messages').scrollHeight;
  markRead();
  $('composer-input').focus();
}

function time(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? '' : d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
}

function renderMessage(m, readers) {
  const mine = m.senderId === client.user;
  const status = m.status === 'pending' ? 'sending…' : m.status === 'failed' ? `not sent (${m.error})` : '';
  return el(
    'li',
    {
      class: `msg ${mine ? 'mine' : 'theirs'} ${m.status}`,
      'data-message-id': m.messageId,
      'data-correlation-id': m.correlationId,
      'data-sender': m.senderId,
    },
    el(
      'div',
      { class: 'meta' },
      el('span', { class: 'sender' }, m.senderId),
      ' ',
      el('time', { datetime: m.sentAt }, time(m.sentAt)),
      status ? el('span', { class: 'status' }, ` ${status}`) : '',
    ),
    el('div', { class: 'body', dir: 'auto' }, m.body),
    readers.length ? el('div', { class: 'receipt' }, `read by ${readers.join(', ')}`) : '',
  );
}

function renderOpenChat() {
  const chat = client.chats.get(openChat);
  $('composer').hidden = !chat;
  $('add-member').hidden = chat?.kind !== 'group';
  if (!chat) {
    $('chat-title').textContent = 'No chat open';
    $('chat-members').textContent = client.chats.size ? 'pick a chat' : 'create a chat to start';
    $('message-list').replaceChildren();
    $('load-older').hidden = true;
    return;
  }
  $('chat-title').textContent = chatTitle(chat);
  $('chat-members').textContent = chat.members.join(', ');

  const msgs = client.messages(openChat);
  if (msgs.length > renderedLen && renderedLen > 0) shown += msgs.length - renderedLen; // new ones never push older ones out
  renderedLen = msgs.length;
  const from = Math.max(0, msgs.length - shown);

  // "read by": each reader under the newest message they have read.
  const readersAt = new Map();
  for (const [user, id] of client.reads(openChat)) {
    if (user === client.user) continue;
    if (!readersAt.has(id)) readersAt.set(id, []);
    readersAt.get(id).push(user);
  }

  const box = $('messages');
  const stick = atBottom();
  const before = box.scrollHeight - box.scrollTop;
  reconcile(
    $('message-list'),
    msgs.slice(from).map((m) => {
      const readers = (m.messageId && readersAt.get(m.messageId)) || [];
      return {
        key: m,
        sig: JSON.stringify([m.messageId, m.status, m.error, m.sentAt, readers]),
        build: () => renderMessage(m, readers),
      };
    }),
    messageEls,
  );
  $('load-older').hidden = from === 0;
  if (stick) box.scrollTop = box.scrollHeight;
  else box.scrollTop = box.scrollHeight - before; // keep what the reader was looking at
}

function loadOlder() {
  shown += PAGE;
  renderOpenChat();
}

// ---- forms ---------------------------------------------------------------

function members(text) {
  return text.split(/[\s,]+/).filter(Boolean);
}

async function createChat(e) {
  e.preventDefault();
  const kind = e.submitter?.value || 'direct';
  const list = members($('new-members').value);
  const err = $('new-chat-error');
  err.textContent = '';
  if (kind === 'direct' && list.length !== 1) {
    err.textContent = 'A direct chat has exactly one other member.';
    return;
  }
  try {
    const chat = await client.createChat(kind, list, $('new-title').value.trim());
    $('new-members').value = '';
    $('new-title').value = '';
    open(chat.chatId);
  } catch (ex) {
    err.textContent = ex.message;
  }
}

async function addMember(e) {
  e.preventDefault();
  const input = $('add-member-input');
  try {
    await client.addMember(openChat, input.value.trim());
    input.value = '';
    $('chat-error').textContent = '';
  } catch (ex) {
    $('chat-error').textContent = ex.message;
  }
}

function composerKey(e) {
  if (e.key !== 'Enter' || e.shiftKey || e.isComposing) return;
  e.preventDefault();
  const input = $('composer-input');
  const body = input.value;
  if (!body.trim() || !openChat) return;
  const bytes = new TextEncoder().encode(body).length;
  if (bytes > client.limits.maxBodyBytes) {
    $('chat-error').textContent = `Too long: ${bytes} bytes, the server takes ${client.limits.maxBodyBytes}.`;
    return;
  }
  $('chat-error').textContent = '';
  client.send(openChat, body);
  input.value = '';
  $('messages').scrollTop = $('messages').scrollHeight;
}

// ---- wiring --------------------------------------------------------------

$('token-form').addEventListener('submit', (e) => {
  e.preventDefault();
  signin($('token-input').value);
});
$('signout').addEventListener('click', () => signout());
$('new-chat').addEventListener('submit', createChat);
$('add-member').addEventListener('submit', addMember);
$('composer').addEventListener('submit', (e) => e.preventDefault());
$('composer-input').addEventListener('keydown', composerKey);
$('load-older').addEventListener('click', loadOlder);
$('messages').addEventListener('scroll', () => {
  if ($('messages').scrollTop < 30 && !$('load-older').hidden) loadOlder();
  markRead();
});
document.addEventListener('visibilitychange', markRead);
addEventListener('focus', () => client?.state === State.CONNECTED && client.refreshChats());

const saved = sessionStorage.getItem(TOKEN_KEY);
if (saved) startApp(saved, sessionStorage.getItem(DEMO_USER_KEY) || '');
else showSignin();
