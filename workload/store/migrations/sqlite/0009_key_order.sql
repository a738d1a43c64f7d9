-- tetra SQLite schema, version 9 (issue 22): history's idempotency key is
-- UNIQUE (correlation_id, sender_id) instead of (sender_id, correlation_id).
-- Both answer the dedupe lookup (sender and correlationId both equal,
-- PROTOCOL.md §3) with one probe. They differ in where a new key goes:
-- ordered by sender first, each message of a batch lands on its sender's
-- page of the index, a random page per message that the commit writes to
-- the WAL whole (53 of a one-to-one commit's 136 WAL frames at 4,000 msg/s,
-- docs/benchmarks.md, ninth pass). Clients draw correlationIds that grow
-- with time (ULIDs in tetra's Go client, UUIDv7, per-connection counters),
-- so ordered by correlationId first the keys of a batch land on the last
-- pages: 2 frames a commit in the same run, and 8 % less CPU. Random
-- correlationIds (UUIDv4) land at random under either order.
--
-- SQLite cannot change a table's UNIQUE constraint in place: the table is
-- rebuilt under the same name, its rows copied with their ids, its
-- AUTOINCREMENT counter kept (an id is never reused, deleted rows
-- included), and its indexes made again: the upgrade rewrites the whole
-- history once, holding the writer meanwhile. legacy_alter_table keeps
-- outbox_messages' REFERENCES history (id) naming history while the old
-- table is renamed away (the writer runs with foreign keys off).

-- +goose Up
PRAGMA legacy_alter_table = ON;
ALTER TABLE history RENAME TO history_v8;
CREATE TABLE history (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id     TEXT    NOT NULL UNIQUE,
    chat_id        TEXT    NOT NULL REFERENCES chats (id),
    sender_id      TEXT    NOT NULL,
    sender_device  TEXT    NOT NULL DEFAULT '',
    correlation_id TEXT    NOT NULL,
    body           TEXT    NOT NULL,
    sent_at        INTEGER NOT NULL,
    kind           INTEGER NOT NULL DEFAULT 0,
    ref            TEXT    NOT NULL DEFAULT '',
    edited_at      INTEGER NOT NULL DEFAULT 0,
    deleted        INTEGER NOT NULL DEFAULT 0,
    UNIQUE (correlation_id, sender_id)
);
INSERT INTO history (id, message_id, chat_id, sender_id, sender_device, correlation_id, body, sent_at, kind, ref, edited_at, deleted)
    SELECT id, message_id, chat_id, sender_id, sender_device, correlation_id, body, sent_at, kind, ref, edited_at, deleted
    FROM history_v8 ORDER BY id;
UPDATE sqlite_sequence SET seq = (SELECT seq FROM sqlite_sequence WHERE name = 'history_v8')
    WHERE name = 'history' AND EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'history_v8');
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'history', seq FROM sqlite_sequence WHERE name = 'history_v8'
    AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'history');
DROP TABLE history_v8;
CREATE INDEX history_sent_at ON history (sent_at);
CREATE INDEX history_ref ON history (ref) WHERE kind <> 0;
CREATE INDEX history_unread ON history (chat_id, id, sender_id, kind, deleted);
PRAGMA legacy_alter_table = OFF;

-- +goose Down
PRAGMA legacy_alter_table = ON;
ALTER TABLE history RENAME TO history_v9;
CREATE TABLE history (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id     TEXT    NOT NULL UNIQUE,
    chat_id        TEXT    NOT NULL REFERENCES chats (id),
    sender_id      TEXT    NOT NULL,
    sender_device  TEXT    NOT NULL DEFAULT '',
    correlation_id TEXT    NOT NULL,
    body           TEXT    NOT NULL,
    sent_at        INTEGER NOT NULL,
    kind           INTEGER NOT NULL DEFAULT 0,
    ref            TEXT    NOT NULL DEFAULT '',
    edited_at      INTEGER NOT NULL DEFAULT 0,
    deleted        INTEGER NOT NULL DEFAULT 0,
    UNIQUE (sender_id, correlation_id)
);
INSERT INTO history (id, message_id, chat_id, sender_id, sender_device, correlation_id, body, sent_at, kind, ref, edited_at, deleted)
    SELECT id, message_id, chat_id, sender_id, sender_device, correlation_id, body, sent_at, kind, ref, edited_at, deleted
    FROM history_v9 ORDER BY id;
UPDATE sqlite_sequence SET seq = (SELECT seq FROM sqlite_sequence WHERE name = 'history_v9')
    WHERE name = 'history' AND EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'history_v9');
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'history', seq FROM sqlite_sequence WHERE name = 'history_v9'
    AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'history');
DROP TABLE history_v9;
CREATE INDEX history_sent_at ON history (sent_at);
CREATE INDEX history_ref ON history (ref) WHERE kind <> 0;
CREATE INDEX history_unread ON history (chat_id, id, sender_id, kind, deleted);
PRAGMA legacy_alter_table = OFF;
