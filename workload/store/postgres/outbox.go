package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tetra-messenger/tetra/workload/outbox"
	"github.com/tetra-messenger/tetra/workload/store/storecore"
)

// Partition is the one partition of the PostgreSQL outbox log.
const Partition = storecore.Partition

// checkPartition refuses every partition but 0 (storecore.CheckPartition).
func checkPartition(op string, p int32) error {
	return storecore.CheckPartition("postgres", "PostgreSQL", op, p)
}

// headSQL reads the outbox sequence: the last id drawn, 0 when none ever
// was. It survives deletes and restarts.
const headSQL = `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM outbox_id_seq`

// lockSharedSQL waits until no transaction holds the append lock. Ids are
// drawn only under that lock, which is released after the transaction's
// commit is visible, so once it is granted every id the sequence has given
// out belongs to a committed (or rolled back) transaction.
const lockSharedSQL = `SELECT pg_advisory_xact_lock_shared($1)`

// Head returns the highest outbox position ever drawn, read from the
// outbox sequence, so it survives deletes and restarts; 0 when no row was
// ever appended. It first takes the append lock in shared mode (released
// at the end of its one round trip): that waits for a Commit in flight to
// finish, so the head never names a row that is not committed yet and every
// row a later Scan returns lies above it. A partition other than 0 is an
// error; store failures wrap outbox.ErrUnavailable.
func (db *DB) Head(ctx context.Context, partition int32) (int64, error) {
	if err := checkPartition("head", partition); err != nil {
		return 0, err
	}
	b := &pgx.Batch{}
	b.Queue(lockSharedSQL, AppendLockKey)
	b.Queue(headSQL)
	br := db.pool.SendBatch(ctx, b)
	defer br.Close()
	var head int64
	if _, err := br.Exec(); err != nil {
		return 0, logUnavailable("head", err)
	}
	if err := br.QueryRow().Scan(&head); err != nil {
		return 0, logUnavailable("head", err)
	}
	if err := br.Close(); err != nil {
		return 0, logUnavailable("head", err)
	}
	return head, nil
}

// scanQuery is the outbox scan: a range of the outbox primary key, each row
// joined by key to its history row.
const scanQuery = `SELECT o.id, o.recipient, o.created_at,
	       ` + messageColumns + `
	FROM outbox AS o JOIN history AS h ON h.id = o.history_id
	WHERE o.id > $1 ORDER BY o.id LIMIT $2`

// Scan returns up to limit committed rows with position above after, in
// position order, each joined with its history row: a forward range read
// of the outbox's primary key plus one keyed lookup into history per row.
// Positions are drawn under the append lock, held until the drawing
// transaction's commit is visible, so a row committed later never has a
// lower position than one already returned. limit < 1 and partitions other
// than 0 are errors; store failures wrap outbox.ErrUnavailable.
func (db *DB) Scan(ctx context.Context, partition int32, after int64, limit int) ([]outbox.Row, error) {
	if err := checkPartition("scan", partition); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, fmt.Errorf("postgres: outbox scan: limit %d, want at least 1", limit)
	}
	rows, err := db.pool.Query(ctx, scanQuery, after, int64(limit))
	if err != nil {
		return nil, logUnavailable("scan", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outbox.Row, error) {
		var r outbox.Row
		var created int64
		dest, done := messageDest(&r.Message)
		err := row.Scan(append([]any{&r.Pos, &r.Recipient, &created}, dest...)...)
		done()
		r.Partition = Partition
		r.CreatedAt = fromNanos(created)
		return r, err
	})
	if err != nil {
		return nil, logUnavailable("scan", err)
	}
	if out == nil {
		out = []outbox.Row{}
	}
	return out, nil
}

// DeleteBelow deletes every outbox row with position below pos (a prefix)
// with one statement and returns how many it deleted. Positions are never
// reused afterwards. A partition other than 0 is an error; store failures
// wrap outbox.ErrUnavailable and delete nothing. While the process holds
// the instance lock (LockInstance), the statement deletes only if the
// lock's session still holds it and no process of another namespace or
// fleet uses the database; otherwise it deletes nothing and the error
// wraps outbox.ErrUnavailable and ErrLockLost.
func (db *DB) DeleteBelow(ctx context.Context, partition int32, pos int64) (int64, error) {
	if err := checkPartition("delete", partition); err != nil {
		return 0, err
	}
	l := db.inst.Load()
	if l == nil {
		tag, err := db.pool.Exec(ctx, `DELETE FROM outbox WHERE id < $1`, pos)
		if err != nil {
			return 0, logUnavailable("delete", err)
		}
		return tag.RowsAffected(), nil
	}
	var ok bool
	var n int64
	err := db.pool.QueryRow(ctx, `WITH g AS (SELECT `+deleteGuardSQL+` AS ok),
		d AS (DELETE FROM outbox WHERE id < $8 AND (SELECT ok FROM g) RETURNING 1)
		SELECT (SELECT ok FROM g), (SELECT count(*) FROM d)`, append(l.guardArgs(), pos)...).Scan(&ok, &n)
	if err != nil {
		return 0, logUnavailable("delete", err)
	}
	if !ok {
		return 0, logUnavailable("delete", fmt.Errorf("%w, or another tetra process of another --index-prefix or fleet uses the database: deleting nothing until the lock is held alone again", ErrLockLost))
	}
	return n, nil
}

// Stats returns, from one statement, the number of rows present (an exact
// count, linear in the depth), the head as Head reports it (after the same
// shared append lock), and the CreatedAt of the row with the lowest
// position (zero when empty). A partition other than 0 is an error.
func (db *DB) Stats(ctx context.Context, partition int32) (outbox.Stats, error) {
	if err := checkPartition("stats", partition); err != nil {
		return outbox.Stats{}, err
	}
	b := &pgx.Batch{}
	b.Queue(lockSharedSQL, AppendLockKey)
	b.Queue(`SELECT (SELECT count(*) FROM outbox), (` + headSQL + `),
		(SELECT created_at FROM outbox ORDER BY id LIMIT 1)`)
	br := db.pool.SendBatch(ctx, b)
	defer br.Close()
	st := outbox.Stats{Partition: Partition}
	var oldest *int64
	if _, err := br.Exec(); err != nil {
		return outbox.Stats{}, logUnavailable("stats", err)
	}
	if err := br.QueryRow().Scan(&st.Depth, &st.Head, &oldest); err != nil {
		return outbox.Stats{}, logUnavailable("stats", err)
	}
	if err := br.Close(); err != nil {
		return outbox.Stats{}, logUnavailable("stats", err)
	}
	if oldest != nil {
		st.OldestAt = fromNanos(*oldest)
	}
	return st, nil
}

// ID names this database's outbox: "postgres:" and the random id minted
// when its schema was created (table tetra_meta). Stable for the life of
// the database; a restored copy shares it.
func (db *DB) ID(ctx context.Context) (string, error) {
	var id string
	if err := db.pool.QueryRow(ctx, `SELECT value FROM tetra_meta WHERE key = 'outbox_id'`).Scan(&id); err != nil {
		return "", logUnavailable("outbox id", err)
	}
	return "postgres:" + id, nil
}
