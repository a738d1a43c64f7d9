-- tetra PostgreSQL schema, version 2: facts about the store itself.
-- outbox_id names this database's outbox for as long as it exists, so two
-- deployments can tell whether they share an outbox (a waterline index key
-- prefix must never be shared by two outboxes: see outbox.Log.ID).

-- +goose Up
CREATE TABLE tetra_meta (
    key   text COLLATE "C" PRIMARY KEY,
    value text NOT NULL
);
INSERT INTO tetra_meta (key, value) VALUES ('outbox_id', gen_random_uuid()::text);

-- +goose Down
DROP TABLE tetra_meta;
