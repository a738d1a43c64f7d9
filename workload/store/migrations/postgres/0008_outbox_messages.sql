-- tetra PostgreSQL schema, version 8 (issue 22): the outbox keeps one
-- record per message instead of one row per recipient, as the SQLite
-- store has since its schema 7, and counts its rows.
--
-- A record lists the message's recipients in member order. The log's rows
-- and their positions are unchanged for its readers: a record of n
-- recipients holds the rows at positions id - n + 1 .. id, one per
-- recipient in order, so its id is the position of its last row. Commit
-- draws the n positions of every record of a batch under the append lock,
-- from the sequence outbox_id_seq (which Head reads and which survives
-- deletes), in one setval. A one-to-one message wrote two rows and two
-- entries of outbox_history, and GC deleted four; a group message of ten
-- members twenty and forty. Now each writes one record and one entry.
--
-- outbox_line.below is the line of the last DeleteBelow that fell inside
-- a record (some of its recipients acknowledged, some not): the record
-- stays, and its rows under the line are deleted for every reader.
-- outbox_appended.rows counts the rows Commit ever appended and
-- outbox_line.removed those DeleteBelow and PurgeHistory removed, each
-- moved in the transaction that changes the rows, so Stats (the metrics
-- scrape, the admin page) reads the depth as their difference instead of
-- counting every row. Two rows, not one: a commit never waits for a GC
-- transaction's row lock (and its fsync), nor GC for a commit.
--
-- The rows of schema 7 are packed at their own positions: the rows left
-- of a message are a suffix of its run (DeleteBelow deletes prefixes, and
-- a message's rows were drawn one after another under the append lock), so
-- the record's id is the highest of their ids and n their count.
--
-- The migration first locks the old outbox against every write: a process
-- of the previous build still running (a rolling upgrade) waits, and its
-- commit or GC delete then fails on the dropped table (the send is
-- answered unavailable and stored nothing; the rows are not deleted), so
-- no row is packed twice, left out or counted wrong. Until it is replaced,
-- such a process refuses every send: upgrade across this version by
-- replacing the old processes (the operator's Recreate, or stop them
-- first), or accept that they refuse sends meanwhile.

-- +goose Up
LOCK TABLE outbox IN EXCLUSIVE MODE;
CREATE TABLE outbox_messages (
    id         bigint PRIMARY KEY,
    history_id bigint NOT NULL,
    recipients text[] NOT NULL,
    n          integer NOT NULL CHECK (n >= 1 AND n = cardinality(recipients)),
    created_at bigint NOT NULL
);
CREATE INDEX outbox_messages_history ON outbox_messages (history_id);
CREATE TABLE outbox_line (
    id      integer PRIMARY KEY CHECK (id = 1),
    below   bigint NOT NULL,
    removed bigint NOT NULL
);
CREATE TABLE outbox_appended (
    id   integer PRIMARY KEY CHECK (id = 1),
    rows bigint NOT NULL
);
INSERT INTO outbox_messages (id, history_id, recipients, n, created_at)
    SELECT max(id), history_id, array_agg(recipient ORDER BY id), count(*), min(created_at)
    FROM outbox GROUP BY history_id;
INSERT INTO outbox_line (id, below, removed) VALUES (1, 0, 0);
INSERT INTO outbox_appended (id, rows) VALUES (1, (SELECT count(*) FROM outbox));
ALTER SEQUENCE outbox_id_seq OWNED BY outbox_messages.id;
DROP TABLE outbox;

-- +goose Down
LOCK TABLE outbox_messages, outbox_line, outbox_appended IN EXCLUSIVE MODE;
CREATE TABLE outbox (
    id         bigint NOT NULL DEFAULT nextval('outbox_id_seq') PRIMARY KEY,
    recipient  text COLLATE "C" NOT NULL,
    history_id bigint NOT NULL,
    created_at bigint NOT NULL
);
ALTER SEQUENCE outbox_id_seq OWNED BY outbox.id;
CREATE INDEX outbox_history ON outbox (history_id);
INSERT INTO outbox (id, recipient, history_id, created_at)
    SELECT o.id - o.n + r.ord, r.recipient, o.history_id, o.created_at
    FROM outbox_messages AS o, unnest(o.recipients) WITH ORDINALITY AS r(recipient, ord)
    WHERE o.id - o.n + r.ord >= (SELECT below FROM outbox_line)
    ORDER BY 1;
DROP TABLE outbox_appended;
DROP TABLE outbox_line;
DROP TABLE outbox_messages;
