-- tetra SQLite schema, version 6 (PROTOCOL.md §7.3 with §7.2): a deleted
-- message is not unread. history_unread gains deleted, so the unread
-- count of ordinary messages that are not deleted (kind = 0 AND
-- deleted = 0) stays a range of one covering index.

-- +goose Up
DROP INDEX history_unread;
CREATE INDEX history_unread ON history (chat_id, id, sender_id, kind, deleted);

-- +goose Down
DROP INDEX history_unread;
CREATE INDEX history_unread ON history (chat_id, id, sender_id, kind);
