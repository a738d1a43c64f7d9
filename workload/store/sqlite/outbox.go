package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/tetra-messenger/tetra/workload/outbox"
	"github.com/tetra-messenger/tetra/workload/store/storecore"
)

// Partition is the one partition of the SQLite outbox log.
const Partition = storecore.Partition

// checkPartition refuses every partition but 0 (storecore.CheckPartition).
func checkPartition(op string, p int32) error {
	return storecore.CheckPartition("sqlite", "SQLite", op, p)
}

// Head returns the highest outbox position ever assigned, read from
// sqlite_sequence so it survives deletes and reopening; 0 when no row was
// ever appended. A partition other than 0 is an error.
func (db *DB) Head(ctx context.Context, partition int32) (int64, error) {
	if err := checkPartition("head", partition); err != nil {
		return 0, err
	}
	var head int64
	if err := db.rHead.QueryRowContext(ctx).Scan(&head); err != nil {
		return 0, logUnavailable("head", err)
	}
	return head, nil
}

// Scan returns up to limit rows with position above after, in position
// order, each joined with its history row. It is a forward range read of
// the outbox's primary key plus one keyed lookup into history per row.
// Positions are assigned under the single writer lock in commit order, so a
// row committed later never has a lower position than one already returned.
// limit < 1 and partitions other than 0 are errors; store failures wrap
// outbox.ErrUnavailable.
func (db *DB) Scan(ctx context.Context, partition int32, after int64, limit int) ([]outbox.Row, error) {
	if err := checkPartition("scan", partition); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, fmt.Errorf("sqlite: outbox scan: limit %d, want at least 1", limit)
	}
	rows, err := db.rScan.QueryContext(ctx, after, limit)
	if err != nil {
		return nil, logUnavailable("scan", err)
	}
	defer rows.Close()
	// Grown by append: most scans find few rows or none (the fast path
	// delivered them), and a slice sized for the limit cost every poll
	// hundreds of kilobytes of garbage (70 % of the bytes BenchmarkE2EPair
	// allocated).
	var out []outbox.Row
	for rows.Next() {
		var r outbox.Row
		var created, sentAt, editedAt int64
		var kind int
		var ref string
		var deleted bool
		m := &r.Message
		if err := rows.Scan(&r.Pos, &r.Recipient, &created,
			&m.Seq, &m.ID, &m.ChatID, &m.SenderID, &m.SenderDevice, &m.CorrelationID, &m.Body, &sentAt,
			&kind, &ref, &editedAt, &deleted); err != nil {
			return nil, logUnavailable("scan", err)
		}
		r.Partition = Partition
		r.CreatedAt = fromNanos(created)
		m.SentAt = fromNanos(sentAt)
		setKind(m, kind, ref, editedAt, deleted)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, logUnavailable("scan", err)
	}
	return out, nil
}

// DeleteBelow deletes every outbox row with position below pos (a prefix)
// on the writer, in statements of at most 2,000 ids, and returns how many
// it deleted. Positions are never reused afterwards. A partition other than
// 0 is an error; store failures wrap outbox.ErrUnavailable, and the rows
// deleted before the failure stay deleted (all below pos: reclaimable
// anyway).
func (db *DB) DeleteBelow(ctx context.Context, partition int32, pos int64) (int64, error) {
	if err := checkPartition("delete", partition); err != nil {
		return 0, err
	}
	// In chunks of deleteChunk ids, each its own statement: the store has
	// one writer, and a prefix of tens of thousands of rows deleted at once
	// holds it for hundreds of milliseconds, which every group commit
	// waiting behind it adds to its latency.
	var total int64
	for {
		res, err := db.w.ExecContext(ctx, `DELETE FROM outbox WHERE id < ? AND id < (SELECT min(id) FROM outbox) + ?`, pos, deleteChunk)
		if err != nil {
			return total, logUnavailable("delete", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, logUnavailable("delete", err)
		}
		total += n
		if n == 0 {
			return total, nil
		}
	}
}

// deleteChunk is the most outbox ids one DELETE statement covers.
const deleteChunk = 2000

// Stats returns, from one snapshot, the number of rows present (a count,
// linear in the depth), the head as Head reports it, and the CreatedAt of
// the row with the lowest position (zero when empty). A partition other
// than 0 is an error.
func (db *DB) Stats(ctx context.Context, partition int32) (outbox.Stats, error) {
	if err := checkPartition("stats", partition); err != nil {
		return outbox.Stats{}, err
	}
	// One statement reads one snapshot.
	st := outbox.Stats{Partition: Partition}
	var oldest sql.NullInt64
	err := db.r.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM outbox),
		coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'outbox'), 0),
		(SELECT created_at FROM outbox ORDER BY id LIMIT 1)`).Scan(&st.Depth, &st.Head, &oldest)
	if err != nil {
		return outbox.Stats{}, logUnavailable("stats", err)
	}
	if oldest.Valid {
		st.OldestAt = fromNanos(oldest.Int64)
	}
	return st, nil
}

// ID names this database's outbox: "sqlite:" and the random id minted when
// its schema was created (table tetra_meta). Stable for the life of the
// database file; a copy of the file shares it.
func (db *DB) ID(ctx context.Context) (string, error) {
	var id string
	if err := db.r.QueryRowContext(ctx, `SELECT value FROM tetra_meta WHERE key = 'outbox_id'`).Scan(&id); err != nil {
		return "", logUnavailable("outbox id", err)
	}
	return "sqlite:" + id, nil
}

// fleetMetaKey is the tetra_meta key of the fleet identity (FleetRecorder).
const fleetMetaKey = "fleet"

// Fleet implements history.FleetRecorder.
func (db *DB) Fleet(ctx context.Context) (string, error) {
	var v string
	err := db.r.QueryRowContext(ctx, `SELECT value FROM tetra_meta WHERE key = ?`, fleetMetaKey).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", unavailable("fleet identity", err)
	}
	return v, nil
}

// SetFleet implements history.FleetRecorder.
func (db *DB) SetFleet(ctx context.Context, identity string) error {
	_, err := db.w.ExecContext(ctx, `INSERT INTO tetra_meta (key, value) VALUES (?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, fleetMetaKey, identity)
	if err != nil {
		return unavailable("record the fleet identity", err)
	}
	return nil
}

// ProbeWrite implements history.WriteProber.
func (db *DB) ProbeWrite(ctx context.Context) error {
	if _, err := db.w.ExecContext(ctx, `UPDATE tetra_meta SET value = value WHERE key = 'outbox_id'`); err != nil {
		return unavailable("write probe", err)
	}
	return nil
}
