-- tetra PostgreSQL schema, version 4 (issue 23, PROTOCOL.md §7.2, §7.5,
-- §7.6): admins, membership intervals, history visibility, closed groups.
-- The same shape as the SQLite schema (see its 0004 for each column).
--
-- chats.history: 'shared' or 'member' (§7.6). chats.closed: the last
-- member left the group (§7.5). members.joined_at (Unix nanoseconds),
-- joined_seq (the highest Seq when added; the current interval holds the
-- Seqs above it) and admin_at (0: not an admin). member_spans: the closed
-- intervals (from_seq, to_seq] of a member, to_seq the removal's cutoff.

-- +goose Up
ALTER TABLE chats ADD COLUMN history text NOT NULL DEFAULT 'shared' CHECK (history IN ('shared', 'member'));
ALTER TABLE chats ADD COLUMN closed boolean NOT NULL DEFAULT false;
ALTER TABLE members ADD COLUMN joined_at bigint NOT NULL DEFAULT 0;
ALTER TABLE members ADD COLUMN joined_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE members ADD COLUMN admin_at bigint NOT NULL DEFAULT 0;
UPDATE members AS m SET joined_at = c.created_at FROM chats AS c WHERE c.id = m.chat_id;
UPDATE members AS m SET admin_at = m.joined_at FROM chats AS c
    WHERE c.id = m.chat_id AND c.kind = 'group' AND c.created_by = m.user_id;
UPDATE members AS m SET admin_at = m.joined_at FROM chats AS c
    WHERE c.id = m.chat_id AND c.kind = 'group' AND m.admin_at = 0
      AND NOT EXISTS (SELECT 1 FROM members AS o WHERE o.chat_id = m.chat_id AND o.admin_at > 0)
      AND m.user_id = (SELECT min(o.user_id) FROM members AS o WHERE o.chat_id = m.chat_id);
CREATE TABLE member_spans (
    chat_id  text COLLATE "C" NOT NULL,
    user_id  text COLLATE "C" NOT NULL,
    from_seq bigint NOT NULL,
    to_seq   bigint NOT NULL,
    PRIMARY KEY (chat_id, user_id, from_seq)
);

-- +goose Down
DROP TABLE member_spans;
ALTER TABLE members DROP COLUMN admin_at;
ALTER TABLE members DROP COLUMN joined_seq;
ALTER TABLE members DROP COLUMN joined_at;
ALTER TABLE chats DROP COLUMN closed;
ALTER TABLE chats DROP COLUMN history;
