-- tetra SQLite schema, version 4 (issue 23, PROTOCOL.md §7.2, §7.5, §7.6):
-- admins, membership intervals, history visibility, closed groups.
--
-- chats.history is the group's history setting ('shared' or 'member',
-- §7.6); direct chats are 'shared'. chats.closed is 1 once the last member
-- left a group (§7.5): the chat then answers as unknown.
--
-- members.joined_at is when the member was last added (Unix nanoseconds;
-- the chat's creation for the members it was created with), the
-- lastActivity floor of §7.2 and the order "joined earliest" of §7.5.
-- members.joined_seq is the highest Seq committed when it was added (0 for
-- the creation's members): the current membership interval holds the
-- messages with a Seq above it. members.admin_at is when the member became
-- an admin, 0 when it is none; admins are listed by it (the creator first).
--
-- member_spans keeps the closed membership intervals: (from_seq, to_seq]
-- is the Seq range a member received before a removal (to_seq is the
-- removal's cutoff). A 'member' group shows a member the messages of its
-- intervals only.
--
-- Rows of version 3 get joined_at = the chat's creation, joined_seq = 0
-- (they read everything, as before), the group's creator as its admin, or
-- for a group without a recorded creator its earliest member by id.

-- +goose Up
ALTER TABLE chats ADD COLUMN history TEXT NOT NULL DEFAULT 'shared' CHECK (history IN ('shared', 'member'));
ALTER TABLE chats ADD COLUMN closed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE members ADD COLUMN joined_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE members ADD COLUMN joined_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE members ADD COLUMN admin_at INTEGER NOT NULL DEFAULT 0;
UPDATE members SET joined_at = (SELECT c.created_at FROM chats AS c WHERE c.id = members.chat_id);
UPDATE members SET admin_at = joined_at WHERE EXISTS (SELECT 1 FROM chats AS c
    WHERE c.id = members.chat_id AND c.kind = 'group' AND c.created_by = members.user_id);
UPDATE members SET admin_at = joined_at WHERE admin_at = 0
    AND EXISTS (SELECT 1 FROM chats AS c WHERE c.id = members.chat_id AND c.kind = 'group')
    AND NOT EXISTS (SELECT 1 FROM members AS o WHERE o.chat_id = members.chat_id AND o.admin_at > 0)
    AND user_id = (SELECT min(o.user_id) FROM members AS o WHERE o.chat_id = members.chat_id);
CREATE TABLE member_spans (
    chat_id  TEXT    NOT NULL,
    user_id  TEXT    NOT NULL,
    from_seq INTEGER NOT NULL,
    to_seq   INTEGER NOT NULL,
    PRIMARY KEY (chat_id, user_id, from_seq)
) WITHOUT ROWID;

-- +goose Down
DROP TABLE member_spans;
ALTER TABLE members DROP COLUMN admin_at;
ALTER TABLE members DROP COLUMN joined_seq;
ALTER TABLE members DROP COLUMN joined_at;
ALTER TABLE chats DROP COLUMN closed;
ALTER TABLE chats DROP COLUMN history;
