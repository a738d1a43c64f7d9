-- tetra SQLite schema, version 7 (issue 22): the outbox keeps one record
-- per message instead of one row per recipient. A record lists the
-- message's recipients, in member order, as a JSON array. The log's rows
-- and their positions are unchanged for its readers: a record of n
-- recipients holds the rows at positions id - n + 1 .. id, one per
-- recipient in order, so its id is the position of its last row, and
-- AUTOINCREMENT keeps the highest position ever assigned (Head) across
-- deletes. A group message of ten members wrote ten rows and ten entries
-- of outbox_history, and GC deleted twenty; now it writes one record.
--
-- history_id ascends with id (records are appended in commit order), so
-- a purge finds a message's record by a range of id (sqlite.PurgeHistory),
-- with no index of its own.
--
-- outbox_line.below is the line of the last DeleteBelow that fell inside a
-- record (some of its recipients acknowledged, some not): the record stays,
-- and its rows under the line are deleted for every reader.
--
-- The rows of schema 6 are packed at their own positions: the rows left of
-- a message are a suffix of its run (DeleteBelow deletes prefixes), so the
-- record's id is the highest of their ids and n their count.

-- +goose Up
CREATE TABLE outbox_messages (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    history_id INTEGER NOT NULL REFERENCES history (id),
    recipients TEXT    NOT NULL,
    n          INTEGER NOT NULL CHECK (n >= 1),
    created_at INTEGER NOT NULL
);
CREATE TABLE outbox_line (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    below INTEGER NOT NULL
);
INSERT INTO outbox_line (id, below) VALUES (1, 0);
INSERT INTO outbox_messages (id, history_id, recipients, n, created_at)
    SELECT max(id), history_id, json_group_array(recipient), count(*), min(created_at)
    FROM (SELECT id, history_id, recipient, created_at FROM outbox ORDER BY id)
    GROUP BY history_id ORDER BY max(id);
UPDATE sqlite_sequence SET seq = (SELECT seq FROM sqlite_sequence WHERE name = 'outbox')
    WHERE name = 'outbox_messages';
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'outbox_messages', seq FROM sqlite_sequence WHERE name = 'outbox'
    AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'outbox_messages');
DROP INDEX outbox_history;
DROP TABLE outbox;

-- +goose Down
CREATE TABLE outbox (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    recipient  TEXT    NOT NULL,
    history_id INTEGER NOT NULL REFERENCES history (id),
    created_at INTEGER NOT NULL
);
CREATE INDEX outbox_history ON outbox (history_id);
INSERT INTO outbox (id, recipient, history_id, created_at)
    SELECT o.id - o.n + 1 + j.key, j.value, o.history_id, o.created_at
    FROM outbox_messages AS o, json_each(o.recipients) AS j
    WHERE o.id - o.n + 1 + j.key >= (SELECT below FROM outbox_line)
    ORDER BY 1;
UPDATE sqlite_sequence SET seq = (SELECT seq FROM sqlite_sequence WHERE name = 'outbox_messages')
    WHERE name = 'outbox';
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'outbox', seq FROM sqlite_sequence WHERE name = 'outbox_messages'
    AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'outbox');
DROP TABLE outbox_line;
DROP TABLE outbox_messages;
