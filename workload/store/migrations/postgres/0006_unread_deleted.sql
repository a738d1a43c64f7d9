-- tetra PostgreSQL schema, version 6 (PROTOCOL.md §7.3 with §7.2): a
-- deleted message is not unread. history_unread gains deleted, so the
-- unread count of ordinary messages that are not deleted (kind = 0 AND
-- NOT deleted) stays an index-only range of it. A delete now updates an
-- indexed column (no HOT update for that row); deletes are rare.

-- +goose Up
DROP INDEX history_unread;
CREATE INDEX history_unread ON history (chat_id, id) INCLUDE (sender_id, kind, deleted);

-- +goose Down
DROP INDEX history_unread;
CREATE INDEX history_unread ON history (chat_id, id) INCLUDE (sender_id, kind);
