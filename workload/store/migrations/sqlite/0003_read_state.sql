-- tetra SQLite schema, version 3 (issue 14): read state and membership
-- changes (PROTOCOL.md §2, §3).
--
-- chats.created_by is the group's creator, who may remove other members;
-- '' for chats created before version 3 (nobody may remove others there,
-- everyone may still leave).
--
-- reads.seq is the Seq (history.id) of reads.message_id: a read marker
-- only moves forward by it. Rows of version 2 get the Seq of their message
-- when it is still in history, else 0 (the next receipt moves them).
--
-- history_unread covers the unread count: for one chat, the messages with
-- a Seq above the reader's marker not sent by the reader, counted up to
-- history.MaxUnread entries of this index and never the table. It
-- replaces history_chat (same leading columns, so Page keeps its range).

-- +goose Up
ALTER TABLE chats ADD COLUMN created_by TEXT NOT NULL DEFAULT '';
ALTER TABLE reads ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
UPDATE reads SET seq = coalesce((SELECT h.id FROM history AS h
    WHERE h.message_id = reads.message_id AND h.chat_id = reads.chat_id), 0);
CREATE INDEX history_unread ON history (chat_id, id, sender_id);
DROP INDEX history_chat;

-- +goose Down
CREATE INDEX history_chat ON history (chat_id, id);
DROP INDEX history_unread;
ALTER TABLE reads DROP COLUMN seq;
ALTER TABLE chats DROP COLUMN created_by;
