// client.js: the client contract of PROTOCOL.md for the browser, with no
// user interface. app.js renders what this module reports.
//
// What it guarantees, and how:
// - one WebSocket at a time (token in the `token` query parameter, a device id
//   per tab); after any close it reconnects with exponential backoff and
//   jitter, except after 4001 (another tab took this device over) or when the
//   token is refused (HTTP 401, detected by probing /api/chats).
// - after every hello it lists the chats and pages each one's history from the
//   chat's cursor (limit=500, following hasMore). The cursor advances ONLY with
//   history pages: live frames may arrive out of commit order, so moving the
//   cursor to a live messageId could skip a message committed before it.
// - every message frame is acknowledged (duplicates too); messages are
//   deduplicated by messageId, and the sender's own messages by correlationId
//   until the server names their messageId.
// - sends are idempotent: each gets a correlationId once, and the same frame is
//   resent on every reconnect until the server answers accepted or a final
//   error. The queue survives a reload of the tab (sessionStorage).
// - the socket does not outlive its token: the server closes it with 4005 when
//   the token's exp passes (PROTOCOL.md §1). Given a refreshToken callback (the
//   application mints tokens), the client asks it for a new token of the same
//   user REFRESH_BEFORE_MS ahead of exp (halfway for shorter tokens), sends
//   {"type":"refresh","token":...} on the open socket and uses the new token
//   from then on ("token" event); after a 4005 it gets one before reconnecting.
//   Without a callback, 4005 stops the client ("unauthorized", expired: true).
// - read state is the server's (PROTOCOL.md §2, §3): every chat listing
//   carries each member's lastRead and the caller's unread count; `read`
//   frames (other members', and this user's own from its other devices) move
//   a member's marker forward only. unread() counts from this user's marker,
//   so a read on one device clears the count on every other and survives a
//   reload.
// - membership follows `chat` events ("added", "removed", "updated") and the
//   answers of addMember/removeMember; every full listing (after a hello, on
//   refreshChats) also drops chats the server no longer lists, so a removal
//   missed while disconnected is noticed too.

/** Connection states reported by the "state" event. */
export const State = Object.freeze({
  CONNECTING: 'connecting',
  CONNECTED: 'connected',
  RECONNECTING: 'reconnecting',
  OFFLINE: 'offline',
});

const PAGE_LIMIT = 500; // history page size of a catch-up (the contract allows at least 500)
export const OPEN_LIMIT = 50; // messages of the newest page a chat opens with, and of each older page
const TYPING_EVERY_MS = 2000; // at most one typing frame per chat this often (PROTOCOL.md §7.4)
export const TYPING_SHOWN_MS = 5000; // "typing" is shown this long after the last frame
const ACK_CHUNK = 500; // ids per ack frame (the server takes up to 1024)
const CHAT_REFRESH_MS = 20000; // how often the chat list is fetched again while connected
const RETRYABLE = new Set(['overloaded', 'rate_limited', 'credit_exhausted']);
const REFRESH_BEFORE_MS = 30000; // ask for a new token this long before exp

/**
 * backoff returns the wait in ms before reconnect attempt number `attempt`
 * (0 first): lo doubled per attempt, capped at hi, with "equal jitter"
 * (uniform in [d/2, d]) so that clients dropped together do not return together.
 */
export function backoff(attempt, lo = 250, hi = 10000) {
  const d = Math.min(hi, lo * 2 ** Math.min(attempt, 16));
  return d / 2 + Math.random() * (d / 2);
}

/** ApiError is a non-2xx answer of the HTTP API. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message || `HTTP ${status}`);
    this.status = status;
    this.code = code;
  }
}

/** api calls the HTTP API with a bearer token and returns the decoded JSON. */
export async function api(token, method, path, body) {
  const res = await fetch(path, {
    method,
    headers: {
      Authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store',
  });
  const data = await res.json().catch(() => ({}));
  if (!res.ok) throw new ApiError(res.status, data.error?.code, data.error?.message);
  return data;
}

/** tokenClaims returns the claims of a JWT without verifying them (the server does), or {}. */
function tokenClaims(token) {
  try {
    const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    const json = new TextDecoder().decode(Uint8Array.from(atob(part), (c) => c.charCodeAt(0)));
    return JSON.parse(json) || {};
  } catch {
    return {};
  }
}

/** tokenUser returns the sub claim of a JWT without verifying it (display only). */
export function tokenUser(token) {
  return tokenClaims(token).sub || '';
}

/** tokenExp returns a JWT's exp claim in ms since the epoch, or 0 when it has none. */
export function tokenExp(token) {
  const exp = Number(tokenClaims(token).exp);
  return Number.isFinite(exp) && exp > 0 ? exp * 1000 : 0;
}

/**
 * refreshDelay returns how long to wait before refreshing a token that
 * expires at exp (ms since the epoch): REFRESH_BEFORE_MS ahead, or halfway
 * through what is left when that is less than twice as much.
 */
export function refreshDelay(exp, now = Date.now()) {
  const left = exp - now;
  return Math.max(0, left - Math.min(REFRESH_BEFORE_MS, left / 2));
}

/**
 * ChatLog holds one chat's messages, deduplicated, in display order: messages
 * confirmed by a history page first, in commit order (seq), then the others
 * (live, or own messages not yet in a page) in the order they arrived.
 */
class ChatLog {
  constructor() {
    this.byId = new Map(); // messageId -> message
    this.byCorr = new Map(); // correlationId -> own message (this tab's sends)
    this.list = [];
    this.cursor = ''; // last messageId of the last history page
    this.seq = 0;
    this.reads = new Map(); // userId -> messageId (newest read receipt)
    this.synced = false; // a history sync reached the end once
    this.loaded = false; // the newest page was fetched (PROTOCOL.md §7.1): catch-ups follow it
    this.hasMore = false; // older messages than the oldest held exist on the server
    this.oldest = ''; // messageId of the oldest message of a history page held
    this.minSeq = 0; // seq of the oldest message held (older pages get lower ones)
    this.edits = new Map(); // messageId -> {body, editedAt} or {deleted}: an edit or delete seen before its target
    this.sorted = true;
    this.syncing = Promise.resolve();
  }

  ordered() {
    if (!this.sorted) {
      this.list.sort((a, b) => (a.seq ?? Infinity) - (b.seq ?? Infinity) || a.arrival - b.arrival);
      this.sorted = true;
    }
    return this.list;
  }

  indexOf(messageId) {
    const m = this.byId.get(messageId);
    return m ? this.ordered().indexOf(m) : -1;
  }

  /**
   * after reports whether messageId a comes after b: by their places in
   * this log when both are known, else by id (message ids are ULIDs, ordered
   * by time of commit to within a clock's skew).
   */
  after(a, b) {
    const i = this.indexOf(a);
    const j = this.indexOf(b);
    return i >= 0 && j >= 0 ? i > j : a > b;
  }

  /** advance moves user's read marker to messageId if that is forward; reports a change. */
  advance(user, messageId) {
    const prev = this.reads.get(user);
    if (!messageId || prev === messageId || (prev && !this.after(messageId, prev))) return false;
    this.reads.set(user, messageId);
    return true;
  }
}

let arrivals = 0;

/** countOthers counts the stored messages of list from index i on not sent by user and not deleted. */
function countOthers(list, i, user) {
  let n = 0;
  for (; i < list.length; i++) if (list[i].senderId !== user && list[i].messageId && !list[i].deleted) n++; // a deleted message is not unread (docs/design.md)
  return n;
}

/**
 * Client keeps one user's connection and chats. Events (CustomEvent, data in
 * `detail`): "state" {state, code, reason, retryInMs}, "hello" {hello},
 * "chats", "messages" {chatId}, "read" {chatId, userId, messageId},
 * "removed" {chat, why: "left"|"removed"} (this user is no longer a member),
 * "token" {token} (a refreshed token is in use), "unauthorized" {expired}.
 *
 * refreshToken, optional, is the application's way to mint a new token of
 * the same user: an async function returning the token (see the header).
 */
export class Client extends EventTarget {
  constructor({ token, device, storage = globalThis.sessionStorage, refreshToken = null }) {
    super();
    this.token = token;
    this.refreshToken = refreshToken;
    this.refreshTimer = 0;
    this.user = tokenUser(token);
    this.device = device;
    this.storage = storage;
    this.state = State.OFFLINE;
    this.chats = new Map(); // chatId -> chat
    this.logs = new Map(); // chatId -> ChatLog
    this.limits = { maxInFlightSends: 16, maxBodyBytes: 4096, pingIntervalMs: 15000 };
    this.ws = null;
    this.gen = 0; // connection generation: callbacks of an old socket are ignored
    this.attempt = 0;
    this.timer = 0;
    this.stopped = true;
    this.acks = [];
    this.inflight = 0;
    this.pendingReads = new Map(); // chatId -> messageId not sent yet
    this.leaving = new Set(); // chatIds this user is leaving (its own "removed" event may come first)
    // A listing answered after an event or an own call changed a chat's
    // membership must not undo that change: changes counts them, touched
    // remembers the count of each chat's last one.
    this.changes = 0;
    this.touched = new Map(); // chatId -> changes
    this.outbox = this.loadOutbox(); // [{chatId, correlationId, body}]
    for (const o of this.outbox) if (!o.edits) this.addOwn(o);
    this.typers = new Map(); // chatId -> Map(userId -> ms when "typing" ends)
    this.typingSent = new Map(); // chatId -> ms of the last typing frame sent
    this.presence = new Map(); // userId -> {online, lastSeen}
    this.onOnline = () => this.connectNow();
    this.onOffline = () => this.ws?.close(4000, 'browser offline');
  }

  emit(type, detail = {}) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  log(chatId) {
    let l = this.logs.get(chatId);
    if (!l) this.logs.set(chatId, (l = new ChatLog()));
    return l;
  }

  /** messages returns a chat's messages in display order (do not modify). */
  messages(chatId) {
    return this.log(chatId).ordered();
  }

  /** hasOlder reports whether the server holds messages of chatId older than those held here. */
  hasOlder(chatId) {
    const log = this.log(chatId);
    return !log.loaded || log.hasMore;
  }

  /** reads returns a chat's newest read receipt per user (userId -> messageId). */
  reads(chatId) {
    return this.log(chatId).reads;
  }

  /**
   * unread counts the messages of chatId that others sent after this user's
   * read marker. Until the chat's history is loaded it is the server's count.
   */
  unread(chatId) {
    const log = this.log(chatId);
    const mark = log.reads.get(this.user);
    const list = log.ordered();
    const i = mark ? log.indexOf(mark) : -1;
    if (!(mark && i >= 0) && (!log.synced || log.hasMore)) return this.chats.get(chatId)?.unread ?? countOthers(list, 0, this.user);
    return countOthers(list, i + 1, this.user); // a marker purged from history: all that is left
  }

  api(method, path, body) {
    return api(this.token, method, path, body);
  }

  setState(state, extra = {}) {
    this.state = state;
    this.emit('state', { state, ...extra });
  }

  // ---- connection ------------------------------------------------------

  /** start connects and keeps connecting until stop. */
  start() {
    if (!this.stopped) return;
    this.stopped = false;
    addEventListener('online', this.onOnline);
    addEventListener('offline', this.onOffline);
    this.connect();
  }

  /** stop closes the socket and stops reconnecting. */
  stop(reason = 'stopped') {
    this.stopped = true;
    this.gen++;
    clearTimeout(this.timer);
    clearTimeout(this.refreshTimer);
    clearInterval(this.pinger);
    clearInterval(this.lister);
    removeEventListener('online', this.onOnline);
    removeEventListener('offline', this.onOffline);
    this.ws?.close(1000, 'bye');
    this.ws = null;
    this.setState(State.OFFLINE, { reason });
  }

  /** connectNow skips the backoff wait (the browser came back online). */
  connectNow() {
    if (!this.stopped && !this.ws) {
      this.attempt = 0;
      this.connect();
    }
  }

  connect() {
    clearTimeout(this.timer);
    if (this.stopped) return;
    const exp = tokenExp(this.token);
    if (this.refreshToken && !this.renewed && (this.renew || (exp && exp <= Date.now()))) {
      // An expired token would get 401 (a reload of an old tab, a 4005).
      this.renew = false;
      const gen = this.gen;
      this.newToken()
        .catch((err) => console.warn('tetra: no new token before reconnecting', err)) // the upgrade's 401 decides
        .finally(() => {
          if (gen !== this.gen || this.stopped) return;
          this.renewed = true; // once per attempt: dial now, whatever the outcome
          this.connect();
        });
      return;
    }
    this.renewed = false;
    if (globalThis.navigator?.onLine === false) {
      this.setState(State.OFFLINE, { reason: 'the browser is offline' });
      return; // the "online" event reconnects
    }
    const gen = ++this.gen;
    const url = new URL('/ws', location.href);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    url.searchParams.set('token', this.token);
    url.searchParams.set('device', this.device);
    if (this.state !== State.RECONNECTING) this.setState(State.CONNECTING);
    const ws = new WebSocket(url);
    this.ws = ws;
    let greeted = false;
    let lastFrame = Date.now();
    ws.onmessage = (e) => {
      if (gen !== this.gen) return;
      lastFrame = Date.now();
      let f;
      try {
        f = JSON.parse(e.data);
      } catch {
        return;
      }
      if (f.type === 'hello') {
        greeted = true;
        this.onHello(f, gen, () => lastFrame);
      } else {
        this.onFrame(f);
      }
    };
    ws.onclose = (e) => {
      if (gen !== this.gen) return;
      this.onClose(e.code, e.reason, greeted);
    };
  }

  onHello(hello, gen, lastFrame) {
    this.user = hello.userId;
    this.limits = { ...this.limits, ...hello.limits };
    this.attempt = 0;
    this.inflight = 0;
    for (const o of this.outbox) o.inflight = false;
    this.setState(State.CONNECTED);
    this.emit('hello', { hello });
    // Liveness: an app-level ping every interval; a socket silent for two
    // intervals is dead (a vanished peer may never deliver a close).
    const every = Math.max(1000, this.limits.pingIntervalMs || 15000);
    clearInterval(this.pinger);
    this.pinger = setInterval(() => {
      if (gen !== this.gen) return;
      if (Date.now() - lastFrame() > 2 * every + 5000) this.ws?.close(4000, 'no answer');
      else this.write({ type: 'ping' });
    }, every);
    // New chats are announced by their first message; a chat created
    // without one shows up at this slow refresh (or at the next reconnect).
    clearInterval(this.lister);
    this.lister = setInterval(() => gen === this.gen && this.refreshChats(), CHAT_REFRESH_MS);
    for (const [chatId, messageId] of this.pendingReads) this.sendRead(chatId, messageId);
    this.scheduleRefresh(gen);
    this.pump();
    this.resync(gen);
  }

  // ---- token refresh (PROTOCOL.md §1) ------------------------------------

  /** scheduleRefresh arms the refresh of the current token before its exp. */
  scheduleRefresh(gen) {
    clearTimeout(this.refreshTimer);
    const exp = tokenExp(this.token);
    if (!this.refreshToken || !exp) return;
    this.refreshTimer = setTimeout(() => this.refresh(gen), refreshDelay(exp));
  }

  /**
   * newToken asks the application for a token and installs it. A token of
   * another user is refused (the socket belongs to this one).
   */
  async newToken() {
    const tok = await this.refreshToken();
    if (!tok || tokenUser(tok) !== this.user) throw new Error('refreshToken gave no token of this user');
    this.token = tok;
    this.emit('token', { token: tok });
    return tok;
  }

  /** refresh sends a new token on the open socket (answered "refreshed"). */
  async refresh(gen, failures = 0) {
    try {
      const tok = await this.newToken();
      if (gen !== this.gen) return; // a newer socket dials with the new token
      this.write({ type: 'refresh', token: tok });
      this.scheduleRefresh(gen);
    } catch (err) {
      if (gen !== this.gen) return;
      console.warn('tetra: token refresh failed; retrying', err);
      this.refreshTimer = setTimeout(() => this.refresh(gen, failures + 1), backoff(failures, 500, 10000));
    }
  }

  onClose(code, reason, greeted) {
    clearInterval(this.pinger);
    clearInterval(this.lister);
    clearTimeout(this.refreshTimer);
    this.ws = null;
    this.acks = [];
    if (this.stopped) return;
    if (code === 4001) {
      this.stop('this device was opened in another window');
      return;
    }
    const retry = () => {
      if (this.stopped) return;
      const wait = backoff(this.attempt++);
      this.setState(State.RECONNECTING, { code, reason, retryInMs: Math.round(wait) });
      this.timer = setTimeout(() => this.connect(), wait);
    };
    if (code === 4005) {
      // The token expired: a new one, or sign-in again.
      if (!this.refreshToken) {
        this.stop('the token expired');
        this.emit('unauthorized', { expired: true });
        return;
      }
      this.renew = true; // connect gets a new token first (clocks may disagree on exp)
      retry();
      return;
    }
    if (greeted) {
      retry();
      return;
    }
    // Closed before hello: the upgrade may have been refused. A browser
    // cannot see the HTTP status of a failed upgrade, so ask the API.
    this.api('GET', '/api/chats').then(retry, (err) => {
      if (err instanceof ApiError && err.status === 401) {
        this.stop('the token was refused');
        this.emit('unauthorized');
      } else {
        retry();
      }
    });
  }

  write(frame) {
    if (this.ws?.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify(frame));
    return true;
  }

  onFrame(f) {
    switch (f.type) {
      case 'message':
        this.queueAck(f.messageId);
        if (!this.chats.has(f.chatId)) this.refreshChats();
        this.ingest(f, false);
        break;
      case 'accepted':
        this.onAccepted(f);
        break;
      case 'error':
        if (f.correlationId) this.onSendError(f);
        break;
      case 'read':
        this.onRead(f);
        break;
      case 'refreshed':
        this.emit('refreshed', { exp: f.exp });
        break;
      case 'chat':
        this.onChatEvent(f);
        break;
      case 'typing':
        this.onTyping(f);
        break;
      case 'presence':
        this.setPresence(f.userId, { online: !!f.online, lastSeen: f.lastSeen });
        break;
    }
  }

  queueAck(messageId) {
    this.acks.push(messageId);
    if (this.acks.length > 1) return; // a flush is scheduled
    queueMicrotask(() => {
      const ids = this.acks;
      this.acks = [];
      for (let i = 0; i < ids.length; i += ACK_CHUNK) {
        this.write({ type: 'ack', messageIds: ids.slice(i, i + ACK_CHUNK) });
      }
    });
  }

  // ---- chats and history -----------------------------------------------

  /** touch records a membership change of chatId seen here (an event, an own call). */
  touch(chatId) {
    this.touched.set(chatId, ++this.changes);
  }

  /**
   * setChats stores chats as the server sent them and merges their read
   * markers (forward only). A full listing passes asOf, the value of
   * this.changes when it was requested: a chat not in it was left or
   * removed while this client did not hear of it, unless a change seen
   * since says otherwise (then the listing is older than what is known).
   */
  setChats(chats, asOf = null) {
    const complete = asOf !== null;
    const newer = (id) => complete && (this.touched.get(id) || 0) > asOf;
    for (const c of chats) {
      if (newer(c.chatId) && !this.chats.has(c.chatId)) continue; // left or removed after the listing
      const log = this.log(c.chatId);
      for (const [user, id] of Object.entries(c.lastRead || {})) log.advance(user, id);
      this.chats.set(c.chatId, c);
    }
    if (complete) {
      const listed = new Set(chats.map((c) => c.chatId));
      for (const chat of [...this.chats.values()]) {
        if (!listed.has(chat.chatId) && !newer(chat.chatId)) this.dropChat(chat, 'removed');
      }
    }
    this.emit('chats');
  }

  /** dropChat forgets a chat this user is no longer a member of. */
  dropChat(chat, why) {
    this.touch(chat.chatId);
    if (!this.chats.has(chat.chatId)) return;
    this.chats.delete(chat.chatId);
    this.logs.delete(chat.chatId); // if added again, it syncs from the start
    this.pendingReads.delete(chat.chatId);
    this.emit('removed', { chat, why });
  }

  /** onChatEvent applies a `chat` frame: membership changed (PROTOCOL.md §3). */
  onChatEvent(f) {
    const chat = f.chat;
    if (!chat?.chatId) return;
    if (f.event === 'removed' || (Array.isArray(chat.members) && !chat.members.includes(this.user))) {
      const why = this.leaving.has(chat.chatId) ? 'left' : 'removed';
      this.touch(chat.chatId);
      if (this.chats.has(chat.chatId)) this.dropChat(this.chats.get(chat.chatId), why);
      this.emit('chats');
      return;
    }
    const fresh = !this.chats.has(chat.chatId);
    this.touch(chat.chatId);
    this.setChats([chat]);
    if (fresh || f.event === 'added') this.syncChat(chat.chatId, this.gen).catch(() => {});
  }

  /**
   * listChats fetches the whole chat list, following nextCursor (the server
   * pages it at 100 by default, PROTOCOL.md §7.2), in the server's order:
   * newest lastActivity first.
   */
  async listChats() {
    const all = [];
    let cursor = '';
    for (let i = 0; i < 10000; i++) {
      const q = new URLSearchParams({ limit: '500' });
      if (cursor) q.set('cursor', cursor);
      const page = await this.api('GET', `/api/chats?${q}`);
      all.push(...page.chats);
      if (!page.nextCursor || !page.chats.length) break;
      cursor = page.nextCursor;
    }
    return all;
  }

  /** refreshChats lists the chats again and catches up the ones held. */
  async refreshChats() {
    const gen = this.gen;
    const asOf = this.changes;
    try {
      const chats = await this.listChats();
      this.setChats(chats, asOf);
      await Promise.all(chats.filter((c) => this.log(c.chatId).loaded).map((c) => this.syncChat(c.chatId, gen)));
      this.lookPresence(chats);
    } catch (err) {
      console.warn('tetra: listing chats failed', err);
    }
  }

  async resync(gen, failures = 0) {
    const asOf = this.changes;
    try {
      const chats = await this.listChats();
      if (gen !== this.gen) return;
      this.setChats(chats, asOf);
      this.lookPresence(chats);
      // Only chats whose newest page was fetched are caught up; the others
      // show the listing's lastMessage until they are opened (loadLatest).
      await Promise.all(chats.filter((c) => this.log(c.chatId).loaded).map((c) => this.syncChat(c.chatId, gen)));
    } catch (err) {
      if (gen !== this.gen) return;
      if (err instanceof ApiError && err.status === 401) {
        this.stop('the token was refused');
        this.emit('unauthorized');
        return;
      }
      // Still connected but the sync failed: try again; cursors kept their place.
      this.timer = setTimeout(() => this.resync(gen, failures + 1), backoff(failures));
    }
  }

  /**
   * syncChat pages a chat's history from its cursor to the end; a chat not
   * loaded yet gets its newest page instead (loadLatest). Syncs of one
   * chat run one after another, so the cursor only moves forward.
   */
  syncChat(chatId, gen) {
    const log = this.log(chatId);
    if (!log.loaded) return this.loadLatest(chatId);
    const run = async () => {
      for (;;) {
        if (gen !== this.gen) return; // a newer connection resyncs
        const q = new URLSearchParams({ limit: String(PAGE_LIMIT) });
        if (log.cursor) q.set('since', log.cursor);
        const page = await this.api('GET', `/api/chats/${encodeURIComponent(chatId)}/messages?${q}`);
        for (const m of page.messages) this.ingest(m, true);
        if (page.messages.length) log.cursor = page.messages.at(-1).messageId;
        if (!page.hasMore || page.messages.length === 0) {
          if (!log.synced) {
            log.synced = true;
            this.emit('messages', { chatId }); // unread counts switch to the local count
          }
          return;
        }
      }
    };
    log.syncing = log.syncing.then(run, run);
    return log.syncing;
  }

  /**
   * loadLatest fetches a chat's newest page, OPEN_LIMIT messages, in one
   * request (before=end, PROTOCOL.md §7.1), once: later catch-ups page
   * forward from it (syncChat). Resolves when the page is held.
   */
  loadLatest(chatId) {
    const log = this.log(chatId);
    const run = async () => {
      if (log.loaded) return;
      const q = new URLSearchParams({ before: 'end', limit: String(OPEN_LIMIT) });
      const page = await this.api('GET', `/api/chats/${encodeURIComponent(chatId)}/messages?${q}`);
      if (log.loaded) return;
      for (const m of page.messages) this.ingest(m, true);
      const held = page.messages.filter((m) => !m.edits && !m.deletes);
      log.oldest = page.messages[0]?.messageId || '';
      log.minSeq = 1;
      if (page.messages.length) log.cursor = page.messages.at(-1).messageId;
      log.hasMore = !!page.hasMore;
      log.loaded = true;
      log.synced = true;
      if (!held.length && log.hasMore) log.syncing.then(() => this.loadOlder(chatId)); // a page of edits only
      this.emit('messages', { chatId });
    };
    log.syncing = log.syncing.then(run, run);
    return log.syncing;
  }

  /**
   * loadOlder fetches the OPEN_LIMIT messages before the oldest one held
   * (before=<messageId>) and puts them in front. Resolves to whether older
   * ones may still exist (hasMore).
   */
  loadOlder(chatId) {
    const log = this.log(chatId);
    const run = async () => {
      if (!log.loaded) return this.loadLatest(chatId).then(() => log.hasMore);
      if (!log.hasMore || !log.oldest) return false;
      const q = new URLSearchParams({ before: log.oldest, limit: String(OPEN_LIMIT) });
      const page = await this.api('GET', `/api/chats/${encodeURIComponent(chatId)}/messages?${q}`);
      const n = page.messages.length;
      page.messages.forEach((m, i) => this.ingest(m, true, log.minSeq - n + i));
      log.minSeq -= n;
      if (n) log.oldest = page.messages[0].messageId;
      log.hasMore = !!page.hasMore && n > 0;
      this.emit('messages', { chatId });
      return log.hasMore;
    };
    const p = log.syncing.then(run, run);
    log.syncing = p.catch(() => {});
    return p;
  }

  /**
   * createChat creates a direct chat or a group and syncs it. A group's
   * history is "shared" (members read all of it) or "member" (only what was
   * sent while they were members), PROTOCOL.md §7.6; empty: the server's
   * default (shared).
   */
  async createChat(kind, members, title = '', history = '') {
    const group = kind === 'group';
    const chat = await this.api('POST', '/api/chats', {
      kind,
      members,
      ...(group ? { title } : {}),
      ...(group && history ? { history } : {}),
    });
    this.touch(chat.chatId);
    this.setChats([chat]);
    this.syncChat(chat.chatId, this.gen).catch(() => {});
    return chat;
  }

  /** addMember adds userId to a group chat. */
  async addMember(chatId, userId) {
    const chat = await this.api('POST', `/api/chats/${encodeURIComponent(chatId)}/members`, { userId });
    this.setChats([chat]);
    return chat;
  }

  /**
   * removeMember removes userId from a group chat (DELETE, PROTOCOL.md §2):
   * this user leaves when userId is its own id; only the group's creator may
   * remove another member. Leaving forgets the chat here at once.
   */
  async removeMember(chatId, userId) {
    const path = `/api/chats/${encodeURIComponent(chatId)}/members/${encodeURIComponent(userId)}`;
    const self = userId === this.user;
    if (self) this.leaving.add(chatId);
    let chat;
    try {
      chat = await this.api('DELETE', path);
    } finally {
      if (self) this.leaving.delete(chatId);
    }
    if (self) this.dropChat(this.chats.get(chatId) || chat, 'left');
    else this.setChats([chat]);
    this.emit('chats');
    return chat;
  }

  /** leave removes this user from a group chat. */
  leave(chatId) {
    return this.removeMember(chatId, this.user);
  }

  /**
   * ingest adds a message from a frame or a history page, once per messageId.
   * A history page also confirms the message's place in commit order.
   */
  ingest(m, fromHistory, seq = undefined) {
    const log = this.log(m.chatId);
    if (m.edits || m.deletes) {
      this.applyChange(log, m);
      return;
    }
    if (!fromHistory) this.noteLive(m);
    let cur = log.byId.get(m.messageId);
    if (!cur && m.senderId === this.user && m.correlationId) cur = log.byCorr.get(m.correlationId);
    if (cur) {
      if (!cur.messageId) this.settle(log, cur, m.messageId, m.sentAt);
      if (fromHistory && (m.deleted || m.editedAt)) this.applyState(cur, m);
      if (fromHistory && cur.seq === undefined) {
        cur.seq = seq ?? ++log.seq;
        log.sorted = false;
        this.emit('messages', { chatId: m.chatId });
      }
      return;
    }
    const msg = {
      messageId: m.messageId,
      correlationId: m.correlationId,
      chatId: m.chatId,
      senderId: m.senderId,
      body: m.body,
      sentAt: m.sentAt,
      status: 'sent',
      arrival: ++arrivals,
      seq: fromHistory ? (seq ?? ++log.seq) : undefined,
    };
    this.applyState(msg, m);
    const early = log.edits.get(msg.messageId);
    if (early) {
      this.applyState(msg, early);
      log.edits.delete(msg.messageId);
    }
    log.byId.set(msg.messageId, msg);
    log.list.push(msg);
    log.sorted = false;
    this.emit('messages', { chatId: m.chatId });
  }

  /** applyState copies editedAt and deleted (a history entry, PROTOCOL.md §7.3) onto msg. */
  applyState(msg, m) {
    if (m.deleted) {
      msg.deleted = true;
      msg.body = '';
      msg.editedAt = undefined;
    } else if (m.editedAt && !msg.deleted && !(msg.editedAt && msg.editedAt > m.editedAt)) {
      msg.body = m.body;
      msg.editedAt = m.editedAt;
    }
  }

  /**
   * applyChange applies an edit (`edits`) or a delete (`deletes`) message
   * to its original: the new body and editedAt, or the tombstone. One for a
   * message not held yet is kept until it arrives. Never shown itself.
   */
  applyChange(log, m) {
    const target = m.edits || m.deletes;
    const change = m.deletes ? { deleted: true } : { body: m.body, editedAt: m.sentAt };
    const chat = this.chats.get(m.chatId);
    if (chat?.lastMessage?.messageId === target) {
      chat.lastMessage = m.deletes ? { ...chat.lastMessage, body: '', deleted: true } : { ...chat.lastMessage, body: m.body, editedAt: m.sentAt };
    }
    const msg = log.byId.get(target);
    if (msg) this.applyState(msg, change);
    else if (!log.edits.get(target)?.deleted) log.edits.set(target, change);
    this.emit('messages', { chatId: m.chatId });
  }

  /**
   * noteLive keeps the listing's lastMessage, lastActivity and unread of a
   * chat current as live messages arrive, for the chat list of chats whose
   * history is not held.
   */
  noteLive(m) {
    const chat = this.chats.get(m.chatId);
    if (this.typers.get(m.chatId)?.delete(m.senderId)) this.emit('typing', { chatId: m.chatId }); // it sent: it types no more
    if (!chat || this.log(m.chatId).byId.has(m.messageId)) return;
    if (!chat.lastMessage || m.messageId > chat.lastMessage.messageId) {
      const { type, ...rest } = m;
      chat.lastMessage = rest;
      if (!chat.lastActivity || m.sentAt > chat.lastActivity) chat.lastActivity = m.sentAt;
      if (m.senderId !== this.user) chat.unread = (chat.unread || 0) + 1; // read when no marker is held (unread)
    }
  }

  // settle gives an own message its messageId: it is stored, stop resending.
  settle(log, msg, messageId, sentAt) {
    msg.messageId = messageId;
    msg.sentAt = sentAt || msg.sentAt;
    msg.status = 'sent';
    log.byId.set(messageId, msg);
    this.dropOutbox(msg.correlationId);
  }

  onRead(f) {
    if (!this.chats.has(f.chatId)) return;
    // Receipts only move forward (a late frame for an older message is
    // ignored). f.userId may be this user: a read on another device.
    if (!this.log(f.chatId).advance(f.userId, f.messageId)) return;
    this.emit('read', { chatId: f.chatId, userId: f.userId, messageId: f.messageId });
  }

  /**
   * read marks messageId read: this user's marker moves at once (unread()
   * drops) and the receipt goes out now, or after the next hello.
   */
  read(chatId, messageId) {
    if (!this.log(chatId).advance(this.user, messageId)) return; // not forward: nothing to tell
    this.emit('read', { chatId, userId: this.user, messageId });
    this.sendRead(chatId, messageId);
  }

  sendRead(chatId, messageId) {
    if (this.state === State.CONNECTED && this.write({ type: 'read', chatId, messageId })) {
      this.pendingReads.delete(chatId);
    } else {
      this.pendingReads.set(chatId, messageId);
    }
  }

  // ---- sending ---------------------------------------------------------

  /** send queues body for chatId and returns the pending message. */
  send(chatId, body) {
    this.typingSent.delete(chatId); // receivers stop showing "typing" at a message: the next keystroke tells them again
    const o = { chatId, correlationId: `web-${crypto.randomUUID()}`, body };
    this.outbox.push(o);
    this.saveOutbox();
    const msg = this.addOwn(o);
    this.pump();
    return msg;
  }

  addOwn(o) {
    const log = this.log(o.chatId);
    const msg = {
      correlationId: o.correlationId,
      chatId: o.chatId,
      senderId: this.user,
      body: o.body,
      sentAt: new Date().toISOString(),
      status: 'pending',
      arrival: ++arrivals,
    };
    log.byCorr.set(o.correlationId, msg);
    log.list.push(msg);
    log.sorted = false;
    this.emit('messages', { chatId: o.chatId });
    return msg;
  }

  // pump writes queued sends, within the server's credits (maxInFlightSends).
  pump() {
    if (this.state !== State.CONNECTED) return;
    const now = Date.now();
    for (const o of this.outbox) {
      if (this.inflight >= this.limits.maxInFlightSends) return;
      if (o.inflight || (o.notBefore || 0) > now) continue;
      const frame = { type: 'send', chatId: o.chatId, correlationId: o.correlationId, body: o.body, ...(o.edits ? { edits: o.edits } : {}) };
      if (!this.write(frame)) return;
      o.inflight = true;
      this.inflight++;
    }
  }

  answered(correlationId) {
    const o = this.outbox.find((x) => x.correlationId === correlationId);
    if (o?.inflight) {
      o.inflight = false;
      this.inflight--;
    }
    return o;
  }

  onAccepted(f) {
    this.answered(f.correlationId);
    const log = this.log(f.chatId);
    const msg = log.byCorr.get(f.correlationId);
    if (msg && !msg.messageId) {
      this.settle(log, msg, f.messageId, f.sentAt);
      this.emit('messages', { chatId: f.chatId });
    }
    this.dropOutbox(f.correlationId);
    this.pump();
  }

  onSendError(f) {
    const o = this.answered(f.correlationId);
    if (!o) return;
    if (RETRYABLE.has(f.code)) {
      o.tries = (o.tries || 0) + 1;
      const wait = backoff(o.tries, 500, 10000);
      o.notBefore = Date.now() + wait;
      setTimeout(() => this.pump(), wait + 10);
      return;
    }
    // A final refusal: the message was not stored (PROTOCOL.md §3).
    this.dropOutbox(f.correlationId);
    if (o.edits) {
      this.emit('failed', { chatId: o.chatId, messageId: o.edits, error: `${f.code}: ${f.message}` });
      this.refetch(o.chatId, o.edits);
      this.pump();
      return;
    }
    const msg = this.log(o.chatId).byCorr.get(f.correlationId);
    if (msg) {
      msg.status = 'failed';
      msg.error = `${f.code}: ${f.message}`;
      this.emit('messages', { chatId: o.chatId });
    }
    this.pump();
  }

  dropOutbox(correlationId) {
    const i = this.outbox.findIndex((x) => x.correlationId === correlationId);
    if (i < 0) return;
    if (this.outbox[i].inflight) this.inflight--;
    this.outbox.splice(i, 1);
    this.saveOutbox();
  }

  outboxKey() {
    return `tetra.outbox.${this.user}`;
  }

  loadOutbox() {
    try {
      const raw = JSON.parse(this.storage?.getItem(this.outboxKey()) || '[]');
      return raw.map(({ chatId, correlationId, body, edits }) => ({ chatId, correlationId, body, ...(edits ? { edits } : {}) }));
    } catch {
      return [];
    }
  }

  saveOutbox() {
    const keep = this.outbox.map(({ chatId, correlationId, body, edits }) => ({ chatId, correlationId, body, ...(edits ? { edits } : {}) }));
    this.storage?.setItem(this.outboxKey(), JSON.stringify(keep));
  }

  // ---- edit and delete (PROTOCOL.md §7.3) --------------------------------

  /**
   * edit replaces the body of an own message: a send with `edits`, queued
   * and resent like any send. The new body shows at once (editedAt set).
   */
  edit(chatId, messageId, body) {
    const o = { chatId, correlationId: `web-${crypto.randomUUID()}`, body, edits: messageId };
    this.outbox.push(o);
    this.saveOutbox();
    const msg = this.log(chatId).byId.get(messageId);
    if (msg && !msg.deleted) {
      msg.body = body;
      msg.editedAt = new Date().toISOString();
      this.emit('messages', { chatId });
    }
    this.pump();
  }

  /**
   * deleteMessage deletes a message (own, or any as a group admin, §7.5):
   * DELETE, then the tombstone the server answers replaces it here.
   */
  async deleteMessage(chatId, messageId) {
    const path = `/api/chats/${encodeURIComponent(chatId)}/messages/${encodeURIComponent(messageId)}`;
    const { message } = await this.api('DELETE', path);
    this.ingest({ ...message, chatId, messageId }, true);
    this.applyChange(this.log(chatId), { chatId, deletes: messageId });
    return message;
  }

  // refetch: an edit was refused; the held body is the server's again at the next catch-up.
  refetch(chatId) {
    const log = this.log(chatId);
    if (log.loaded) this.syncChat(chatId, this.gen).catch(() => {});
  }

  // ---- groups that manage themselves (PROTOCOL.md §7.5) -------------------

  /** rename sets a group's title (any admin). */
  async rename(chatId, title) {
    const chat = await this.api('PATCH', `/api/chats/${encodeURIComponent(chatId)}`, { title });
    this.setChats([chat]);
    return chat;
  }

  /** makeAdmin makes a member of a group an admin (any admin). */
  async makeAdmin(chatId, userId) {
    const chat = await this.api('POST', `/api/chats/${encodeURIComponent(chatId)}/admins`, { userId });
    this.setChats([chat]);
    return chat;
  }

  /** isAdmin reports whether userId administers chatId (a group's creator is the first admin). */
  isAdmin(chatId, userId = this.user) {
    const chat = this.chats.get(chatId);
    if (chat?.kind !== 'group') return false;
    return Array.isArray(chat.admins) ? chat.admins.includes(userId) : chat.createdBy === userId;
  }

  // ---- typing and presence (PROTOCOL.md §7.4) -----------------------------

  /** typing tells the chat's other members this user is typing: at most one frame per chat every 2 s. */
  typing(chatId) {
    const now = Date.now();
    if (now - (this.typingSent.get(chatId) || 0) < TYPING_EVERY_MS) return;
    if (this.state === State.CONNECTED && this.write({ type: 'typing', chatId })) this.typingSent.set(chatId, now);
  }

  onTyping(f) {
    if (!f.chatId || !f.userId || f.userId === this.user) return;
    let t = this.typers.get(f.chatId);
    if (!t) this.typers.set(f.chatId, (t = new Map()));
    t.set(f.userId, Date.now() + TYPING_SHOWN_MS);
    this.emit('typing', { chatId: f.chatId, userId: f.userId });
    setTimeout(() => this.emit('typing', { chatId: f.chatId }), TYPING_SHOWN_MS + 20);
  }

  /** typingIn lists the users typing in chatId now (a frame in the last 5 s), sorted. */
  typingIn(chatId, now = Date.now()) {
    const t = this.typers.get(chatId);
    if (!t) return [];
    for (const [u, until] of t) if (until <= now) t.delete(u);
    return [...t.keys()].sort();
  }

  setPresence(userId, p) {
    if (!userId) return;
    this.presence.set(userId, p);
    this.emit('presence', { userId, ...p });
  }

  /**
   * lookPresence asks GET /api/presence about every member of chats (but
   * this user), 500 users a request; presence frames keep it current.
   */
  async lookPresence(chats) {
    const users = [...new Set(chats.flatMap((c) => c.members || []))].filter((u) => u !== this.user).sort();
    for (let i = 0; i < users.length; i += 500) {
      const batch = users.slice(i, i + 500);
      // One comma-separated users, or (an id holding a comma) users
      // repeated, one id each; a lone such id twice (docs/PROTOCOL.md).
      let q = new URLSearchParams({ users: batch.join(',') });
      if (batch.some((u) => u.includes(','))) {
        q = new URLSearchParams();
        for (const u of batch.length === 1 ? [batch[0], batch[0]] : batch) q.append('users', u);
      }
      try {
        const { presence } = await this.api('GET', `/api/presence?${q}`);
        for (const [u, p] of Object.entries(presence || {})) this.setPresence(u, { online: !!p.online, lastSeen: p.lastSeen });
      } catch (err) {
        console.warn('tetra: presence failed', err);
      }
    }
  }

  /** forget drops the persisted send queue (on sign-out). */
  forget() {
    this.storage?.removeItem(this.outboxKey());
  }
}
