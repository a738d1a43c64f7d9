-- tetra PostgreSQL schema, version 1: the same shape as the SQLite schema.
-- Times are bigint Unix nanoseconds (UTC): timestamptz keeps only
-- microseconds, and SentAt must round-trip to the nanosecond. Ids and user
-- ids use the "C" collation, so ORDER BY and the direct pair check compare
-- bytes, as Go's sort does, whatever the database's default collation.
--
-- history.id and outbox.id are BIGSERIAL. Their sequences must keep the
-- default CACHE 1: with a per-session cache, ids would not follow the order
-- in which the append lock is taken (see package postgres, doc.go).

-- +goose Up
CREATE TABLE chats (
    id         text COLLATE "C" PRIMARY KEY,
    kind       text   NOT NULL CHECK (kind IN ('direct', 'group')),
    title      text   NOT NULL DEFAULT '',
    created_at bigint NOT NULL
);

-- One row per direct chat, keyed by the ordered pair: the primary key makes
-- CreateDirect idempotent from either side and under concurrency (INSERT
-- ... ON CONFLICT DO NOTHING).
CREATE TABLE direct_pairs (
    user_a  text COLLATE "C" NOT NULL,
    user_b  text COLLATE "C" NOT NULL,
    chat_id text COLLATE "C" NOT NULL UNIQUE REFERENCES chats (id),
    PRIMARY KEY (user_a, user_b),
    CHECK (user_a < user_b)
);

CREATE TABLE members (
    chat_id text COLLATE "C" NOT NULL REFERENCES chats (id),
    user_id text COLLATE "C" NOT NULL,
    PRIMARY KEY (chat_id, user_id)
);
CREATE INDEX members_user ON members (user_id, chat_id);

-- Bumped by every member added to an existing chat, in the same
-- transaction. Commit keeps an in-process cache of member lists and checks,
-- in the statement that inserts the messages, that the epoch has not moved
-- since the lists were read, so the cache is never stale, even with several
-- processes on one database.
CREATE TABLE membership_epoch (
    id    integer PRIMARY KEY CHECK (id = 1),
    epoch bigint  NOT NULL
);
INSERT INTO membership_epoch (id, epoch) VALUES (1, 0);

-- history.id is the durable commit sequence (history.Message.Seq).
CREATE TABLE history (
    id             bigserial PRIMARY KEY,
    message_id     text COLLATE "C" NOT NULL UNIQUE,
    chat_id        text COLLATE "C" NOT NULL REFERENCES chats (id),
    sender_id      text COLLATE "C" NOT NULL,
    sender_device  text   NOT NULL DEFAULT '',
    correlation_id text COLLATE "C" NOT NULL,
    body           text   NOT NULL,
    sent_at        bigint NOT NULL,
    UNIQUE (sender_id, correlation_id)
);
CREATE INDEX history_chat ON history (chat_id, id);
CREATE INDEX history_sent_at ON history (sent_at, id);

-- outbox.id is the position in the single partition (0) of the log.
-- The foreign key enforces invariant I1 (no delivery row without its
-- history row); its index keeps history purges keyed, not scans.
CREATE TABLE outbox (
    id         bigserial PRIMARY KEY,
    recipient  text COLLATE "C" NOT NULL,
    history_id bigint NOT NULL REFERENCES history (id),
    created_at bigint NOT NULL
);
CREATE INDEX outbox_history ON outbox (history_id);

CREATE TABLE reads (
    chat_id    text COLLATE "C" NOT NULL,
    user_id    text COLLATE "C" NOT NULL,
    message_id text COLLATE "C" NOT NULL,
    at         bigint NOT NULL,
    PRIMARY KEY (chat_id, user_id)
);

-- +goose Down
DROP TABLE reads;
DROP TABLE outbox;
DROP TABLE history;
DROP TABLE membership_epoch;
DROP TABLE members;
DROP TABLE direct_pairs;
DROP TABLE chats;
