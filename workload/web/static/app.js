// app.js: the page. Sign-in (paste a token, or the demo switch when the
// server runs with --demo), the chat list, the message view and the composer.
// The contract itself (connection, resync, dedupe, acks, resends) lives in
// client.js.
//
// Every piece of user data (bodies, names, titles) reaches the page through
// textContent or an attribute value, never through innerHTML. Each piece of
// it sits in an element of its own that isolates its direction (<bdi>, or a
// block with dir="auto" and unicode-bidi: isolate/plaintext), so an RLO in a
// name or a body cannot reorder the text around it; bodies clip what
// combining marks stack above and below them (style.css).
//
// Layout: wide, the chat list beside the conversation; narrow (a phone,
// style.css @media), one of them at a time: #app's data-view is "list" or
// "chat", and the back button (or the browser's) returns to the list.

import { Client, OPEN_LIMIT, State, api, tokenUser } from './client.js';

const TOKEN_KEY = 'tetra.token';
const DEMO_USER_KEY = 'tetra.demoUser'; // set when signed in with the demo switch: tokens can be renewed
const DEVICE_KEY = 'tetra.device';
const PAGE = OPEN_LIMIT; // messages rendered when a chat opens; "load older" reveals (or fetches) PAGE more

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
 * selection or a scroll does not disturb it. An item with update(el) keeps
 * its element when its signature changes too, and update refreshes it in
 * place: a chat item a message just changed is still the element under the
 * pointer, so a tap that began before the message arrived still opens it
 * (a replaced element loses the click; seen in CI).
 */
function reconcile(parent, items, cache) {
  let prev = null;
  const next = () => (prev ? prev.nextElementSibling : parent.firstElementChild);
  for (const { key, sig, build, update } of items) {
    let c = cache.get(key);
    if (c && c.sig !== sig && update) {
      update(c.el);
      c.sig = sig;
    } else if (!c || c.sig !== sig) {
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
const memberEls = new Map(); // userId -> {el, sig}
// Rendered list items of the open chat: messages keyed by their object
// (client.js keeps one per message), day separators by "day:YYYY-MM-DD".
const messageEls = {
  objects: new WeakMap(),
  days: new Map(),
  get(k) {
    return typeof k === 'string' ? this.days.get(k) : this.objects.get(k);
  },
  set(k, v) {
    if (typeof k === 'string') this.days.set(k, v);
    else this.objects.set(k, v);
  },
};

let client = null;
let openChat = ''; // chatId of the open chat
let shown = PAGE; // how many of the open chat's newest messages are rendered
let renderedLen = 0; // the open chat's message count at the last render
let renderQueued = false;
let menuFor = null; // the message whose actions (edit, delete) are open
let confirmDelete = false; // its delete asks "delete this message?"
let editing = null; // the own message the composer edits
let loadingOlder = false;

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
  setView('list');
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
  $('notice').textContent = '';
  client.addEventListener('chats', scheduleRender);
  client.addEventListener('messages', scheduleRender);
  client.addEventListener('read', scheduleRender);
  client.addEventListener('typing', scheduleRender);
  client.addEventListener('presence', scheduleRender);
  client.addEventListener('failed', (e) => e.detail.chatId === openChat && ($('chat-error').textContent = `Not edited (${e.detail.error}).`));
  client.addEventListener('removed', (e) => chatGone(e.detail));
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

// ---- unread counts and read receipts ------------------------------------
//
// Read state is the server's (client.js): a marker per member, forward only,
// returned with every chat listing and echoed to this user's other devices.
// This page moves the user's own marker when the newest message of the open
// chat is on screen.

function atBottom() {
  const box = $('messages');
  return box.scrollHeight - box.scrollTop - box.clientHeight < 40;
}

/** chatVisible: the open chat is on screen (on a phone, the conversation view). */
function chatVisible() {
  return openChat && document.visibilityState === 'visible' && (!narrow() || $('app').dataset.view === 'chat');
}

// markRead: when the open chat is on screen and scrolled to its end, its
// newest message from another member is read (a receipt for one's own
// message tells nobody anything).
function markRead() {
  if (!client || !chatVisible() || !atBottom()) return;
  const theirs = client
    .messages(openChat)
    .filter((m) => m.messageId && m.senderId !== client.user)
    .at(-1);
  if (theirs) client.read(openChat, theirs.messageId); // a no-op unless it moves the marker
}

// ---- links ---------------------------------------------------------------

// Only absolute http and https addresses become links. What the sentence
// around one ends with (a period, a closing bracket it did not open) stays
// text.
const LINK = /\bhttps?:\/\/[^\s<>"'`]+/giu;
const TRAILING = /[.,;:!?'"»”’…]+$/u;

function trimLink(s) {
  for (;;) {
    const t = s.replace(TRAILING, '');
    const last = t.at(-1);
    const pair = { ')': '(', ']': '[', '}': '{' }[last];
    if (pair && t.split(pair).length <= t.split(last).length - 1) s = t.slice(0, -1);
    else return t;
  }
}

/** safeURL returns the parsed address when it is an http(s) URL, else null. */
export function safeURL(s) {
  try {
    const u = new URL(s);
    return u.protocol === 'http:' || u.protocol === 'https:' ? u : null;
  } catch {
    return null;
  }
}

/**
 * linkify splits text into strings and <a> elements, one per http(s)
 * address. The link text is the address as written (a text node); href is
 * the parsed URL, and the link opens in a new tab without access to this
 * one (noopener) and without a Referer (noreferrer).
 */
export function linkify(text) {
  const out = [];
  let at = 0;
  for (const m of text.matchAll(LINK)) {
    const raw = trimLink(m[0]);
    const url = safeURL(raw);
    if (!url || !raw) continue;
    if (m.index > at) out.push(text.slice(at, m.index));
    out.push(el('a', { href: url.href, target: '_blank', rel: 'noopener noreferrer', referrerpolicy: 'no-referrer', title: url.href, dir: 'auto' }, raw));
    at = m.index + raw.length;
  }
  if (at < text.length) out.push(text.slice(at));
  return out;
}

// ---- chat list -----------------------------------------------------------

function chatTitle(chat) {
  if (chat.kind === 'group') return chat.title || chat.members.join(', ');
  return chat.members.find((m) => m !== client.user) || client.user;
}

/** lastMessage is the newest message of a chat held here, or the listing's (PROTOCOL.md §7.2). */
function lastMessage(chat) {
  const held = client.messages(chat.chatId).at(-1);
  const listed = chat.lastMessage;
  if (!held) return listed;
  if (listed && held.messageId && listed.messageId > held.messageId) return listed;
  return held;
}

/** lastActivity orders the chat list: the listing's lastActivity, or a newer message held here. */
function lastActivity(chat) {
  const m = client.messages(chat.chatId).at(-1);
  const a = chat.lastActivity || '';
  return m && m.sentAt > a ? m.sentAt : a;
}

/** peer is the other member of a direct chat ('' for a group). */
function peer(chat) {
  return chat.kind === 'group' ? '' : chat.members.find((m) => m !== client.user) || '';
}

/** lastSeen says when a user was last online ("last seen 14:05", "last seen Mon 3 Dec"). */
function lastSeen(iso) {
  const d = new Date(iso);
  if (!iso || Number.isNaN(d.getTime())) return 'offline';
  const k = dayKey(iso);
  const today = dayKey(new Date().toISOString());
  if (k === today) return `last seen ${time(iso)}`;
  return `last seen ${dayLabel(k).toLowerCase() === 'yesterday' ? 'yesterday' : dayLabel(k)} at ${time(iso)}`;
}

function online(user) {
  return !!client.presence.get(user)?.online;
}

const segmenter = typeof Intl.Segmenter === 'function' ? new Intl.Segmenter() : null;

/** initial is the first grapheme of s (an emoji flag is one), upper-cased. */
function initial(s) {
  const t = s.replace(/[\p{Cf}\s]/gu, ''); // no bidi controls or spaces
  const g = segmenter ? segmenter.segment(t)[Symbol.iterator]().next().value?.segment : t[0];
  return (g || '?').toLocaleUpperCase();
}

/** hue picks one of eight avatar colours for id, always the same one. */
function hue(id) {
  let h = 0;
  for (const c of id) h = (h * 31 + c.codePointAt(0)) >>> 0;
  return `hue-${h % 8}`;
}

function renderChats() {
  const chats = [...client.chats.values()].sort(
    (a, b) => lastActivity(b).localeCompare(lastActivity(a)) || chatTitle(a).localeCompare(chatTitle(b)),
  );
  let total = 0;
  const items = chats.map((chat) => {
    const current = chat.chatId === openChat;
    const n = current && chatVisible() && atBottom() ? 0 : client.unread(chat.chatId);
    total += n;
    const last = lastMessage(chat);
    const title = chatTitle(chat);
    const dot = peer(chat) && online(peer(chat));
    const kind = chat.kind === 'group' ? `group · ${chat.members.length}` : 'direct';
    // fill sets the item's state and contents, keeping the button itself.
    const fill = (b) => {
      if (current) b.setAttribute('aria-current', 'true');
      else b.removeAttribute('aria-current');
      b.replaceChildren(
        el('span', { class: `avatar ${hue(chat.chatId)}${dot ? ' online' : ''}`, 'aria-hidden': 'true' }, initial(title)),
        el('span', { class: 'chat-name', dir: 'auto' }, title),
        el('span', { class: 'chat-kind' }, kind),
        // The server counts up to 1000 (history.MaxUnread); past it, "1000+".
        n ? el('span', { class: 'unread', 'data-unread': String(n), 'aria-label': `${n >= 1000 ? 'over 1000' : n} unread` }, n >= 1000 ? '1000+' : String(n)) : '',
        el(
          'span',
          { class: 'preview' },
          ...(last
            ? [
                el('bdi', { class: 'who' }, last.senderId),
                ': ',
                last.deleted ? el('i', {}, 'message deleted') : el('bdi', {}, last.body),
              ]
            : ['no messages yet']),
        ),
      );
    };
    return {
      key: chat.chatId,
      sig: JSON.stringify([title, kind, n, last?.senderId, last?.body, last?.deleted, last?.sentAt, current, dot]),
      build: () => {
        const b = el('button', { type: 'button', class: 'chat-item', 'data-chat-id': chat.chatId });
        b.addEventListener('click', () => open(chat.chatId));
        fill(b);
        return el('li', {}, b);
      },
      update: (li) => fill(li.firstElementChild),
    };
  });
  reconcile($('chats'), items, chatEls);
  // FSI ... PDI: a user id with bidi controls cannot reorder the title.
  document.title = `${total ? `(${total}) ` : ''}tetra · \u2068${client.user}\u2069`;
}

// chatGone: this user left the chat or was removed from it.
function chatGone({ chat, why }) {
  const name = chat?.chatId && chat.members ? chatTitle(chat) : 'a chat';
  $('notice').textContent = why === 'left' ? `You left “${name}”.` : `You were removed from “${name}”.`;
  if (chat?.chatId === openChat) {
    openChat = '';
    setView('list');
  }
  scheduleRender();
}

// ---- views (phone: one pane at a time) -----------------------------------

const narrowQuery = matchMedia('(max-width: 640px)');
const narrow = () => narrowQuery.matches;

function setView(view) {
  $('app').dataset.view = view;
}

function showList() {
  setView('list');
  closeMembers();
  scheduleRender();
}

// ---- message view --------------------------------------------------------

function open(chatId) {
  if (chatId !== openChat) closeMembers();
  if (chatId !== openChat) stopEditing();
  openChat = chatId;
  shown = PAGE;
  renderedLen = 0;
  menuFor = null;
  // The newest page, in one request (PROTOCOL.md §7.1); a no-op once held.
  client.loadLatest(chatId).then(
    () => {
      if (openChat !== chatId) return;
      render();
      $('messages').scrollTop = $('messages').scrollHeight;
      markRead();
    },
    (err) => openChat === chatId && ($('chat-error').textContent = `Could not load the chat: ${err.message}`),
  );
  $('chat-error').textContent = '';
  $('notice').textContent = '';
  if (narrow() && $('app').dataset.view !== 'chat' && !history.state?.chat) history.pushState({ chat: chatId }, '');
  setView('chat');
  render();
  $('messages').scrollTop = $('messages').scrollHeight;
  markRead();
  if (!narrow()) $('composer-input').focus(); // on a phone the keyboard would cover the chat
}

function time(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? '' : d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
}

/** dayKey is the local calendar day of an RFC 3339 time ("" when unparsable). */
function dayKey(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  return `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, '0')}-${String(d.getDate()).padStart(2, '0')}`;
}

function dayLabel(key) {
  const [y, m, d] = key.split('-').map(Number);
  const day = new Date(y, m - 1, d);
  const today = new Date();
  today.setHours(0, 0, 0, 0);
  const diff = Math.round((today - day) / 86400000);
  if (diff === 0) return 'Today';
  if (diff === 1) return 'Yesterday';
  return day.toLocaleDateString([], {
    weekday: 'short',
    day: 'numeric',
    month: 'short',
    ...(day.getFullYear() !== today.getFullYear() ? { year: 'numeric' } : {}),
  });
}

const GROUP_GAP_MS = 5 * 60 * 1000; // consecutive messages of one sender this close share one header

/** continues reports whether m follows prev in the same group (same sender, day, a short gap). */
function continues(prev, m) {
  if (!prev || prev.senderId !== m.senderId || prev.status === 'failed') return false;
  if (dayKey(prev.sentAt) !== dayKey(m.sentAt)) return false;
  const gap = new Date(m.sentAt) - new Date(prev.sentAt);
  return Number.isFinite(gap) && gap < GROUP_GAP_MS;
}

/**
 * actions lists what this user may do to m: edit its own messages, delete
 * its own, or any message of a group it administers (PROTOCOL.md §7.3, §7.5).
 */
function actions(m) {
  if (!m.messageId || m.deleted) return [];
  const mine = m.senderId === client.user;
  const out = [];
  if (mine) out.push('edit');
  if (mine || client.isAdmin(m.chatId)) out.push('delete');
  return out;
}

function actionRow(m, may) {
  if (confirmDelete) {
    const yes = el('button', { type: 'button', class: 'danger', 'data-action': 'delete-yes' }, 'Delete');
    const no = el('button', { type: 'button', 'data-action': 'delete-no' }, 'Cancel');
    yes.addEventListener('click', () => deleteMessage(m));
    no.addEventListener('click', () => closeMenu());
    return el('div', { class: 'actions' }, el('span', {}, m.senderId === client.user ? 'Delete for everyone?' : `Delete ${m.senderId}’s message?`), yes, no);
  }
  const row = el('div', { class: 'actions' });
  if (may.includes('edit')) {
    const b = el('button', { type: 'button', 'data-action': 'edit' }, 'Edit');
    b.addEventListener('click', () => startEditing(m));
    row.append(b);
  }
  if (may.includes('delete')) {
    const b = el('button', { type: 'button', class: 'danger', 'data-action': 'delete' }, 'Delete');
    b.addEventListener('click', () => {
      confirmDelete = true;
      renderOpenChat();
    });
    row.append(b);
  }
  return row;
}

function renderMessage(m, readers, cont) {
  const mine = m.senderId === client.user;
  const status = m.status === 'pending' ? 'sending…' : m.status === 'failed' ? `not sent (${m.error})` : '';
  const when = new Date(m.sentAt);
  const may = actions(m);
  let menu = '';
  if (may.length) {
    menu = el('button', { type: 'button', class: 'msg-menu', 'aria-label': 'message actions', 'aria-expanded': String(menuFor === m), title: 'edit or delete' }, '⋯');
    menu.addEventListener('click', () => {
      menuFor = menuFor === m ? null : m;
      confirmDelete = false;
      renderOpenChat();
    });
  }
  return el(
    'li',
    {
      class: `msg ${mine ? 'mine' : 'theirs'} ${m.status}${cont ? ' cont' : ''}${m.deleted ? ' deleted' : ''}${may.length ? ' has-menu' : ''}${editing === m ? ' editing' : ''}`,
      'data-message-id': m.messageId,
      'data-correlation-id': m.correlationId,
      'data-sender': m.senderId,
      title: Number.isNaN(when.getTime()) ? false : when.toLocaleString(),
    },
    cont
      ? ''
      : el(
          'div',
          { class: 'meta' },
          el('bdi', { class: 'sender' }, m.senderId),
          ' ',
          el('time', { datetime: m.sentAt }, time(m.sentAt)),
        ),
    menu,
    m.deleted ? el('div', { class: 'body tombstone' }, 'message deleted') : el('div', { class: 'body', dir: 'auto' }, ...linkify(m.body)),
    m.editedAt && !m.deleted ? el('div', { class: 'edited', title: new Date(m.editedAt).toLocaleString() }, 'edited') : '',
    menuFor === m && may.length ? actionRow(m, may) : '',
    status ? el('div', { class: 'status' }, status) : '',
    readers.length
      ? el('div', { class: 'receipt' }, 'read by ', ...readers.flatMap((r, i) => [i ? ', ' : '', el('bdi', {}, r)]))
      : '',
  );
}

function renderDay(key) {
  return el('li', { class: 'day', role: 'separator', 'data-day': key }, el('span', {}, dayLabel(key)));
}

// ---- the header and its member list -------------------------------------

function closeMembers() {
  $('member-panel').hidden = true;
  $('chat-members').setAttribute('aria-expanded', 'false');
  $('leave-confirm').hidden = true;
  $('leave').hidden = false;
}

function toggleMembers() {
  const open = $('member-panel').hidden;
  if (!open) return closeMembers();
  $('member-panel').hidden = false;
  $('chat-members').setAttribute('aria-expanded', 'true');
  renderOpenChat();
}

function renderHeader(chat) {
  const group = chat.kind === 'group';
  $('chat-title').textContent = chatTitle(chat);
  const toggle = $('chat-members');
  toggle.hidden = !group;
  const other = peer(chat);
  const sub = $('chat-sub');
  sub.textContent = group ? '' : other && online(other) ? 'online' : other ? lastSeen(client.presence.get(other)?.lastSeen) : 'direct chat';
  sub.classList.toggle('online', !!other && online(other));
  if (!group) closeMembers();
  if (!group) return;
  const n = chat.members.length;
  toggle.textContent = `${n} member${n === 1 ? '' : 's'}`;
  if ($('member-panel').hidden) return;

  const amAdmin = client.isAdmin(chat.chatId);
  const admin = (u) => client.isAdmin(chat.chatId, u);
  $('rename').hidden = !amAdmin;
  // The field follows the title (a rename by another admin) unless it is being edited.
  const shownTitle = `${chat.chatId}\n${chat.title || ''}`;
  if (amAdmin && document.activeElement !== $('rename-input') && $('rename-input').dataset.shown !== shownTitle) {
    $('rename-input').value = chat.title || '';
    $('rename-input').dataset.shown = shownTitle;
  }
  $('history-mode').textContent =
    chat.history === 'member' ? 'History: members read only what was sent while they were in the group.' : 'History: shared — new members read the earlier messages too.';
  const people = [...chat.members].sort((a, b) => admin(b) - admin(a) || a.localeCompare(b));
  reconcile(
    $('member-list'),
    people.map((u) => ({
      key: u,
      sig: JSON.stringify([chat.chatId, admin(u), u === client.user, amAdmin, online(u)]),
      build: () => {
        const li = el(
          'li',
          { class: 'member', 'data-member': u, 'data-online': online(u) ? 'true' : 'false' },
          el('span', { class: `avatar small ${hue(u)}${online(u) ? ' online' : ''}`, 'aria-hidden': 'true' }, initial(u)),
          el('bdi', { class: 'member-name' }, u),
          admin(u) ? el('span', { class: 'badge admin' }, 'admin') : '',
          u === client.user ? el('span', { class: 'badge' }, 'you') : '',
        );
        if (amAdmin && u !== client.user) {
          const tools = el('span', { class: 'member-tools' });
          if (!admin(u)) {
            const mk = el('button', { type: 'button', class: 'link', 'data-make-admin': u, 'aria-label': `make ${u} an admin` }, 'make admin');
            mk.addEventListener('click', () => makeAdmin(chat.chatId, u));
            tools.append(mk);
          }
          const rm = el('button', { type: 'button', class: 'remove link', 'data-remove': u, 'aria-label': `remove ${u}` }, 'remove');
          rm.addEventListener('click', () => removeMember(chat.chatId, u));
          tools.append(rm);
          li.append(tools);
        }
        return li;
      },
    })),
    memberEls,
  );
}

function renderOpenChat() {
  const chat = client.chats.get(openChat);
  $('composer').hidden = !chat;
  if (!chat) {
    $('chat-title').textContent = 'No chat open';
    $('chat-members').hidden = true;
    $('chat-sub').textContent = client.chats.size ? 'pick a chat' : 'create a chat to start';
    closeMembers();
    $('message-list').replaceChildren();
    $('load-older').hidden = true;
    return;
  }
  renderHeader(chat);

  const msgs = client.messages(openChat);
  if (msgs.length > renderedLen && renderedLen > 0) shown += msgs.length - renderedLen; // new ones never push older ones out
  renderedLen = msgs.length;
  const from = Math.max(0, msgs.length - shown);

  // "read by": each reader (another current member) under the newest
  // message they have read.
  const readersAt = new Map();
  for (const [user, id] of client.reads(openChat)) {
    if (user === client.user || !chat.members.includes(user)) continue;
    if (!readersAt.has(id)) readersAt.set(id, []);
    readersAt.get(id).push(user);
  }

  const items = [];
  let prev = from > 0 ? msgs[from - 1] : null;
  let day = prev ? dayKey(prev.sentAt) : '';
  for (const m of msgs.slice(from)) {
    const d = dayKey(m.sentAt);
    if (d && d !== day) {
      items.push({ key: `day:${d}`, sig: dayLabel(d), build: () => renderDay(d) });
      day = d;
    }
    const readers = ((m.messageId && readersAt.get(m.messageId)) || []).sort();
    const cont = continues(prev, m);
    const menu = menuFor === m ? (confirmDelete ? 2 : 1) : 0;
    items.push({
      key: m,
      sig: JSON.stringify([m.messageId, m.status, m.error, m.sentAt, readers, cont, m.body, m.editedAt, m.deleted, menu, editing === m, actions(m)]),
      build: () => renderMessage(m, readers, cont),
    });
    prev = m;
  }

  const box = $('messages');
  const stick = atBottom();
  const before = box.scrollHeight - box.scrollTop;
  reconcile($('message-list'), items, messageEls);
  $('load-older').hidden = from === 0 && !client.hasOlder(openChat);
  $('load-older').textContent = loadingOlder ? 'loading…' : 'load older';
  if (stick) box.scrollTop = box.scrollHeight;
  else box.scrollTop = box.scrollHeight - before; // keep what the reader was looking at

  const typers = client.typingIn(openChat);
  $('typing').textContent =
    typers.length === 0 ? '' : typers.length === 1 ? `${typers[0]} is typing…` : typers.length === 2 ? `${typers[0]} and ${typers[1]} are typing…` : `${typers.length} people are typing…`;
  if (typers.length) setTimeout(scheduleRender, 1000); // the line goes 5 s after the last frame
}

/**
 * loadOlder shows PAGE more of the open chat: held ones first, then the
 * page before the oldest held, fetched from the server (before=<id>).
 */
async function loadOlder() {
  const chatId = openChat;
  const held = client.messages(chatId).length;
  if (held > shown) {
    shown += PAGE;
    renderOpenChat();
    return;
  }
  if (loadingOlder || !client.hasOlder(chatId)) return;
  loadingOlder = true;
  renderOpenChat();
  try {
    await client.loadOlder(chatId);
    if (openChat === chatId) shown += PAGE;
  } catch (err) {
    $('chat-error').textContent = `Could not load older messages: ${err.message}`;
  } finally {
    loadingOlder = false;
    renderOpenChat();
  }
}

// ---- edit and delete ------------------------------------------------------

function closeMenu() {
  menuFor = null;
  confirmDelete = false;
  renderOpenChat();
}

function startEditing(m) {
  editing = m;
  menuFor = null;
  $('editing').hidden = false;
  $('composer-input').value = m.body;
  $('composer-input').focus();
  renderOpenChat();
}

function stopEditing() {
  if (!editing) return;
  editing = null;
  $('editing').hidden = true;
  $('composer-input').value = '';
  if (client) renderOpenChat();
}

async function deleteMessage(m) {
  closeMenu();
  try {
    await client.deleteMessage(m.chatId, m.messageId);
    $('chat-error').textContent = '';
  } catch (ex) {
    $('chat-error').textContent = ex.message;
  }
}

// ---- group administration ------------------------------------------------

async function rename(e) {
  e.preventDefault();
  const title = $('rename-input').value.trim();
  if (!title) return;
  try {
    await client.rename(openChat, title);
    $('chat-error').textContent = '';
  } catch (ex) {
    $('chat-error').textContent = ex.message;
  }
}

async function makeAdmin(chatId, userId) {
  try {
    await client.makeAdmin(chatId, userId);
    $('chat-error').textContent = '';
  } catch (ex) {
    $('chat-error').textContent = ex.message;
  }
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
    const chat = await client.createChat(kind, list, $('new-title').value.trim(), kind === 'group' ? $('new-history').value : '');
    $('new-members').value = '';
    $('new-title').value = '';
    $('new-history').value = 'shared';
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

async function removeMember(chatId, userId) {
  try {
    await client.removeMember(chatId, userId);
    $('chat-error').textContent = '';
  } catch (ex) {
    $('chat-error').textContent = ex.message;
  }
}

async function leave() {
  const chatId = openChat;
  try {
    await client.leave(chatId); // "removed" event: chatGone closes the chat
  } catch (ex) {
    $('chat-error').textContent = ex.message;
  }
}

function sendComposed() {
  const input = $('composer-input');
  const body = input.value;
  if (!body.trim() || !openChat) return;
  const bytes = new TextEncoder().encode(body).length;
  if (bytes > client.limits.maxBodyBytes) {
    $('chat-error').textContent = `Too long: ${bytes} bytes, the server takes ${client.limits.maxBodyBytes}.`;
    return;
  }
  $('chat-error').textContent = '';
  if (editing) {
    const m = editing;
    stopEditing();
    if (body !== m.body && !m.deleted) client.edit(m.chatId, m.messageId, body);
    return;
  }
  client.send(openChat, body);
  input.value = '';
  $('messages').scrollTop = $('messages').scrollHeight;
}

function composerKey(e) {
  if (e.key === 'Escape' && editing) {
    e.preventDefault();
    stopEditing();
    return;
  }
  if (e.key !== 'Enter' || e.shiftKey || e.isComposing) return;
  e.preventDefault();
  sendComposed();
}

// ---- wiring --------------------------------------------------------------

$('token-form').addEventListener('submit', (e) => {
  e.preventDefault();
  signin($('token-input').value);
});
$('signout').addEventListener('click', () => signout());
$('new-chat').addEventListener('submit', createChat);
$('add-member').addEventListener('submit', addMember);
$('chat-members').addEventListener('click', toggleMembers);
$('leave').addEventListener('click', () => {
  $('leave').hidden = true;
  $('leave-confirm').hidden = false;
});
$('leave-no').addEventListener('click', closeMembers);
$('leave-yes').addEventListener('click', leave);
$('back').addEventListener('click', () => (history.state?.chat ? history.back() : showList()));
addEventListener('popstate', () => $('app').dataset.view === 'chat' && showList());
narrowQuery.addEventListener('change', scheduleRender);
addEventListener('keydown', (e) => e.key === 'Escape' && !$('member-panel').hidden && closeMembers());
$('composer').addEventListener('submit', (e) => {
  e.preventDefault();
  sendComposed();
});
$('composer-input').addEventListener('keydown', composerKey);
$('composer-input').addEventListener('input', () => openChat && !editing && $('composer-input').value && client?.typing(openChat));
$('edit-cancel').addEventListener('click', stopEditing);
$('rename').addEventListener('submit', rename);
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
