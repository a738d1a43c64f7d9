-- tetra SQLite schema, version 5 (PROTOCOL.md §7.3): edits and deletes.
--
-- history.kind is what a row is: 0 an ordinary message (what unread counts
-- and lastMessage shows: filter on kind = 0), 1 an edit, 2 a delete
-- (history.KindMessage, KindEdit, KindDelete). history.ref is the
-- messageId an edit or delete applies to ('' for ordinary messages).
-- history.edited_at is the sent_at of the newest edit of an ordinary
-- message (0: never edited); history.deleted is 1 for a deleted ordinary
-- message, whose body (and its edits' bodies) was set to '' by the delete.
--
-- history_ref finds a message's edits when it is deleted; partial, so an
-- ordinary message's insert writes no entry in it.
-- history_unread gains kind, so the unread count of ordinary messages
-- stays a range of one covering index.
--
-- The columns have constant defaults: ADD COLUMN rewrites nothing.

-- +goose Up
ALTER TABLE history ADD COLUMN kind INTEGER NOT NULL DEFAULT 0;
ALTER TABLE history ADD COLUMN ref TEXT NOT NULL DEFAULT '';
ALTER TABLE history ADD COLUMN edited_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE history ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0;
CREATE INDEX history_ref ON history (ref) WHERE kind <> 0;
DROP INDEX history_unread;
CREATE INDEX history_unread ON history (chat_id, id, sender_id, kind);

-- +goose Down
DROP INDEX history_unread;
CREATE INDEX history_unread ON history (chat_id, id, sender_id);
DROP INDEX history_ref;
ALTER TABLE history DROP COLUMN deleted;
ALTER TABLE history DROP COLUMN edited_at;
ALTER TABLE history DROP COLUMN ref;
ALTER TABLE history DROP COLUMN kind;
