-- tetra SQLite schema, version 2: facts about the store itself (the same
-- shape as the PostgreSQL schema). outbox_id names this database's outbox
-- for as long as it exists (see outbox.Log.ID).

-- +goose Up
CREATE TABLE tetra_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO tetra_meta (key, value) VALUES ('outbox_id', lower(hex(randomblob(16))));

-- +goose Down
DROP TABLE tetra_meta;
