-- tetra SQLite schema, version 1.
-- Times are INTEGER Unix nanoseconds (UTC). AUTOINCREMENT on history and
-- outbox makes ids strictly increasing and never reused, even after the
-- newest rows are deleted (sqlite_sequence keeps the high-water mark).

-- +goose Up
CREATE TABLE chats (
    id         TEXT    PRIMARY KEY,
    kind       TEXT    NOT NULL CHECK (kind IN ('direct', 'group')),
    title      TEXT    NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL
);

-- One row per direct chat, keyed by the ordered pair: the primary key makes
-- CreateDirect idempotent from either side and under concurrency.
CREATE TABLE direct_pairs (
    user_a  TEXT NOT NULL,
    user_b  TEXT NOT NULL,
    chat_id TEXT NOT NULL UNIQUE REFERENCES chats (id),
    PRIMARY KEY (user_a, user_b),
    CHECK (user_a < user_b)
) WITHOUT ROWID;

CREATE TABLE members (
    chat_id TEXT NOT NULL REFERENCES chats (id),
    user_id TEXT NOT NULL,
    PRIMARY KEY (chat_id, user_id)
) WITHOUT ROWID;
CREATE INDEX members_user ON members (user_id, chat_id);

-- Bumped by every member added to an existing chat, in the same
-- transaction. Commit keeps an in-process cache of member lists and drops
-- it when the epoch it reads inside its write transaction has moved, so the
-- cache is never stale, even with several processes on one file.
CREATE TABLE membership_epoch (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    epoch INTEGER NOT NULL
);
INSERT INTO membership_epoch (id, epoch) VALUES (1, 0);

-- history.id is the durable commit sequence (history.Message.Seq).
CREATE TABLE history (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id     TEXT    NOT NULL UNIQUE,
    chat_id        TEXT    NOT NULL REFERENCES chats (id),
    sender_id      TEXT    NOT NULL,
    sender_device  TEXT    NOT NULL DEFAULT '',
    correlation_id TEXT    NOT NULL,
    body           TEXT    NOT NULL,
    sent_at        INTEGER NOT NULL,
    UNIQUE (sender_id, correlation_id)
);
CREATE INDEX history_chat ON history (chat_id, id);
CREATE INDEX history_sent_at ON history (sent_at);

-- outbox.id is the position in the single partition (0) of the log.
-- The foreign key enforces invariant I1 (no delivery row without its
-- history row); its index keeps history purges keyed, not scans.
CREATE TABLE outbox (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    recipient  TEXT    NOT NULL,
    history_id INTEGER NOT NULL REFERENCES history (id),
    created_at INTEGER NOT NULL
);
CREATE INDEX outbox_history ON outbox (history_id);

CREATE TABLE reads (
    chat_id    TEXT    NOT NULL,
    user_id    TEXT    NOT NULL,
    message_id TEXT    NOT NULL,
    at         INTEGER NOT NULL,
    PRIMARY KEY (chat_id, user_id)
) WITHOUT ROWID;

-- +goose Down
DROP TABLE reads;
DROP TABLE outbox;
DROP TABLE history;
DROP TABLE membership_epoch;
DROP TABLE members;
DROP TABLE direct_pairs;
DROP TABLE chats;
