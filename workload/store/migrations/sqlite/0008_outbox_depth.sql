-- tetra SQLite schema, version 8 (issue 22): outbox_line.depth keeps the
-- number of outbox rows present, so that Stats reads it instead of summing
-- every record: the metrics scrape and the admin page's once-a-second
-- sample call Stats, and the sum grows with the outbox (7 ms of CPU a
-- call in a one-to-one run at 4,000 msg/s). Commit, DeleteBelow and
-- PurgeHistory move it in the transaction that changes the rows.
--
-- The rows present are the records' rows less those of the oldest record
-- under the line (only the oldest record can be cut: every older one was
-- deleted before the line was drawn).

-- +goose Up
ALTER TABLE outbox_line ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;
UPDATE outbox_line SET depth =
    (SELECT coalesce(sum(n), 0) FROM outbox_messages)
    - coalesce((SELECT min(max(outbox_line.below - (f.id - f.n + 1), 0), f.n)
                FROM (SELECT id, n FROM outbox_messages ORDER BY id LIMIT 1) AS f), 0);

-- +goose Down
ALTER TABLE outbox_line DROP COLUMN depth;
