-- tetra PostgreSQL schema, version 5 (PROTOCOL.md §7.3): edits and
-- deletes. The same shape as the SQLite schema.
--
-- history.kind is what a row is: 0 an ordinary message (what unread counts
-- and lastMessage shows: filter on kind = 0), 1 an edit, 2 a delete
-- (history.KindMessage, KindEdit, KindDelete). history.ref is the
-- messageId an edit or delete applies to ('' for ordinary messages).
-- history.edited_at is the sent_at of the newest edit of an ordinary
-- message (0: never edited); history.deleted is true for a deleted
-- ordinary message, whose body (and its edits' bodies) the delete set to
-- ''. What PostgreSQL keeps of the old text until VACUUM: docs/design.md,
-- "Edit and delete".
--
-- history_ref finds a message's edits when it is deleted; partial, so an
-- ordinary message's insert writes no entry in it. history_unread gains
-- kind, so the unread count of ordinary messages stays an index-only
-- range. Constant defaults: ADD COLUMN rewrites nothing (PostgreSQL 11+).

-- +goose Up
ALTER TABLE history ADD COLUMN kind smallint NOT NULL DEFAULT 0;
ALTER TABLE history ADD COLUMN ref text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE history ADD COLUMN edited_at bigint NOT NULL DEFAULT 0;
ALTER TABLE history ADD COLUMN deleted boolean NOT NULL DEFAULT false;
CREATE INDEX history_ref ON history (ref) WHERE kind <> 0;
DROP INDEX history_unread;
CREATE INDEX history_unread ON history (chat_id, id) INCLUDE (sender_id, kind);

-- +goose Down
DROP INDEX history_unread;
CREATE INDEX history_unread ON history (chat_id, id) INCLUDE (sender_id);
DROP INDEX history_ref;
ALTER TABLE history DROP COLUMN deleted;
ALTER TABLE history DROP COLUMN edited_at;
ALTER TABLE history DROP COLUMN ref;
ALTER TABLE history DROP COLUMN kind;
