-- tetra PostgreSQL schema, version 7 (issue 22): the foreign keys on the
-- message path are dropped, as the SQLite writer never enforced them.
-- Each one ran a query of its own for every row inserted (PostgreSQL
-- checks a referencing row with SELECT ... FOR KEY SHARE on its parent):
-- one per history row for its chat and one per outbox row for its history
-- row. Together they were a quarter of the database's CPU in a one-to-one
-- run at 4,000 msg/s (docs/benchmarks.md, eighth pass).
--
-- What they guarded holds by construction, as every store must keep it
-- anyway (the Kafka log has no foreign keys at all): Commit inserts a
-- history row only for a chat whose members were read, by its own
-- transaction or, from the member cache, by an earlier one at the
-- membership epoch its insert checks; chats are never deleted (a feature
-- that deletes them must bump the epoch, or a cached list would outlive
-- its chat) and unknown chats are never cached; a message's outbox rows go in the
-- statement that inserts its history row; PurgeHistory deletes a
-- message's outbox rows in the statement that deletes its history row
-- (invariant I1). TestReferencesHoldWithoutForeignKeys runs the
-- conformance suites and then looks for a row whose parent is missing.
--
-- outbox_history stays: PurgeHistory finds a message's outbox rows by it.

-- +goose Up
ALTER TABLE outbox DROP CONSTRAINT outbox_history_id_fkey;
ALTER TABLE history DROP CONSTRAINT history_chat_id_fkey;

-- +goose Down
ALTER TABLE history ADD CONSTRAINT history_chat_id_fkey FOREIGN KEY (chat_id) REFERENCES chats (id);
ALTER TABLE outbox ADD CONSTRAINT outbox_history_id_fkey FOREIGN KEY (history_id) REFERENCES history (id);
