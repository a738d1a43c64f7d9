-- tetra PostgreSQL schema, version 3 (issue 14): read state and membership
-- changes (PROTOCOL.md §2, §3). The same shape as the SQLite schema.
--
-- chats.created_by is the group's creator, who may remove other members;
-- '' for chats created before version 3.
--
-- reads.seq is the Seq (history.id) of reads.message_id: a read marker
-- only moves forward by it.
--
-- history_unread covers the unread count (chat_id, id ranges, sender_id
-- from the index itself): at most history.MaxUnread index entries per
-- chat. It replaces history_chat, whose range Page keeps using.

-- +goose Up
ALTER TABLE chats ADD COLUMN created_by text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE reads ADD COLUMN seq bigint NOT NULL DEFAULT 0;
UPDATE reads AS r SET seq = h.id FROM history AS h
    WHERE h.message_id = r.message_id AND h.chat_id = r.chat_id;
CREATE INDEX history_unread ON history (chat_id, id) INCLUDE (sender_id);
DROP INDEX history_chat;

-- +goose Down
CREATE INDEX history_chat ON history (chat_id, id);
DROP INDEX history_unread;
ALTER TABLE reads DROP COLUMN seq;
ALTER TABLE chats DROP COLUMN created_by;
