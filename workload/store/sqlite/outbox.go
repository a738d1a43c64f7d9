package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/outbox"
	"github.com/tetra-messenger/tetra/workload/store/storecore"
)

// Partition is the one partition of the SQLite outbox log.
const Partition = storecore.Partition

// checkPartition refuses every partition but 0 (storecore.CheckPartition).
func checkPartition(op string, p int32) error {
	return storecore.CheckPartition("sqlite", "SQLite", op, p)
}

// The outbox keeps one record per message (table outbox_messages, schema
// version 7), listing the message's recipients in member order. The log's
// rows are the records' recipients: a record of n recipients holds the
// rows at positions id-n+1 .. id, so its id is its last row's position.
// Positions are dense and ascend in commit then member order, as when each
// row was a row of its own, and AUTOINCREMENT keeps the highest ever
// assigned, so they are never reused. A message of n members costs one
// record to insert and to delete, not n rows and n index entries.
//
// A DeleteBelow line can fall inside a record (some of its recipients
// acknowledged, some not): the record stays, and outbox_line.below keeps
// the line, under which Scan and Stats see no row.

// encodeRecipients is a record's recipients column: a JSON array of the
// user ids, in member order.
func encodeRecipients(members []string) string {
	b, _ := json.Marshal(members) // a []string always marshals
	return string(b)
}

// Head returns the highest outbox position ever assigned (the last row of
// the newest record, kept by AUTOINCREMENT), so it survives deletes and
// reopening; 0 when no row was ever appended. A partition other than 0 is
// an error.
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
// order, each with its history message. It is a forward range read of
// outbox_messages' primary key, from the record that holds the first such
// row, plus one keyed lookup into history per record; rows under the line
// of the last DeleteBelow are skipped. Positions are assigned under the
// single writer lock in commit order, so a row committed later never has a
// lower position than one already returned. limit < 1 and partitions other
// than 0 are errors; store failures wrap outbox.ErrUnavailable.
func (db *DB) Scan(ctx context.Context, partition int32, after int64, limit int) ([]outbox.Row, error) {
	if err := checkPartition("scan", partition); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, fmt.Errorf("sqlite: outbox scan: limit %d, want at least 1", limit)
	}
	// Every record read has a row above after, so limit records hold
	// limit rows, but for the one the line cuts: one more.
	rows, err := db.rScan.QueryContext(ctx, after, limit+1)
	if err != nil {
		return nil, logUnavailable("scan", err)
	}
	defer rows.Close()
	// Grown by append: most scans find few rows or none (the fast path
	// delivered them), and a slice sized for the limit cost every poll
	// hundreds of kilobytes of garbage (70 % of the bytes BenchmarkE2EPair
	// allocated).
	var out []outbox.Row
	for len(out) < limit && rows.Next() {
		var m history.Message
		var recipients string
		var id, n, created, below int64
		dest, done := storecore.MessageDest(&m)
		err := rows.Scan(append([]any{&id, &n, &recipients, &created, &below}, dest...)...)
		done()
		if err != nil {
			return nil, logUnavailable("scan", err)
		}
		var to []string
		if err := json.Unmarshal([]byte(recipients), &to); err != nil || int64(len(to)) != n {
			return nil, logUnavailable("scan", fmt.Errorf("record %d: %d recipients for n = %d (%v)", id, len(to), n, err))
		}
		out = storecore.AppendRecordRows(out, limit, id, to, after, below, m, fromNanos(created))
	}
	if err := rows.Err(); err != nil {
		return nil, logUnavailable("scan", err)
	}
	return out, nil
}

// DeleteBelow deletes every outbox row with position below pos (a prefix)
// on the writer and returns how many it deleted: the records wholly below
// pos, in statements of at most 2,000 positions, then, when pos falls
// inside a record, the line that hides that record's rows below it.
// Positions are never reused afterwards. A partition other than 0 is an
// error; store failures wrap outbox.ErrUnavailable, and the rows deleted
// before the failure stay deleted (all below pos: reclaimable anyway).
func (db *DB) DeleteBelow(ctx context.Context, partition int32, pos int64) (int64, error) {
	if err := checkPartition("delete", partition); err != nil {
		return 0, err
	}
	// In chunks of deleteChunk positions, each its own transaction: the
	// store has one writer, and a prefix of tens of thousands of rows
	// deleted at once holds it for hundreds of milliseconds, which every
	// group commit waiting behind it adds to its latency.
	var total int64
	for {
		n, records, err := db.deleteRecords(ctx, pos)
		total += n
		if err != nil {
			return total, logUnavailable("delete", err)
		}
		if records == 0 {
			break
		}
	}
	n, err := db.cutRecord(ctx, pos)
	total += n
	if err != nil {
		return total, logUnavailable("delete", err)
	}
	return total, nil
}

// deleteChunk is the most positions one deleteRecords statement covers.
const deleteChunk = 2000

// deleteRecords deletes the oldest records whose rows are all below pos,
// up to deleteChunk positions past the oldest, and returns how many rows
// it deleted (not counting those a line had deleted already) and how many
// records; the outbox depth goes down by as many in the same transaction.
func (db *DB) deleteRecords(ctx context.Context, pos int64) (deleted, records int64, err error) {
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, err
	}
	defer rollback(tx)
	rows, err := tx.QueryContext(ctx, `DELETE FROM outbox_messages
		WHERE id < ?1 AND id < (SELECT min(id) FROM outbox_messages) + ?2
		RETURNING id, n, (SELECT below FROM outbox_line)`, pos, deleteChunk)
	if err != nil {
		return 0, 0, err
	}
	deleted, records, err = countDeleted(rows)
	if err != nil || records == 0 {
		return 0, 0, err
	}
	if err := db.lowerDepth(ctx, tx, deleted); err != nil {
		return 0, 0, err
	}
	return deleted, records, tx.Commit()
}

// countDeleted reads the (id, n, below) rows a DELETE of records
// returned: the rows the records held that were not under the line, and
// the records.
func countDeleted(rows *sql.Rows) (deleted, records int64, err error) {
	for rows.Next() {
		var id, n, below int64
		if err := rows.Scan(&id, &n, &below); err != nil {
			rows.Close()
			return 0, 0, err
		}
		deleted += n - cut(id, n, below)
		records++
	}
	return deleted, records, errors.Join(rows.Err(), rows.Close())
}

// lowerDepth takes n rows off the outbox depth (outbox_line.depth) in tx.
func (db *DB) lowerDepth(ctx context.Context, tx *sql.Tx, n int64) error {
	if n == 0 {
		return nil
	}
	_, err := tx.StmtContext(ctx, db.wDepth).ExecContext(ctx, -n)
	return err
}

// cutRecord handles the record pos falls inside, when there is one: the
// line moves up to pos (never down), hiding the record's rows below it. It
// returns how many rows it hid.
func (db *DB) cutRecord(ctx context.Context, pos int64) (int64, error) {
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer rollback(tx)
	var id, n, below int64
	err = tx.QueryRowContext(ctx, `SELECT id, n, (SELECT below FROM outbox_line)
		FROM outbox_messages WHERE id >= ? ORDER BY id LIMIT 1`, pos).Scan(&id, &n, &below)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if id-n+1 >= pos || below >= pos {
		return 0, nil // pos is not inside it, or the line is past pos already
	}
	hidden := (pos - (id - n + 1)) - cut(id, n, below)
	if _, err := tx.ExecContext(ctx, `UPDATE outbox_line SET below = ?`, pos); err != nil {
		return 0, err
	}
	if err := db.lowerDepth(ctx, tx, hidden); err != nil {
		return 0, err
	}
	return hidden, tx.Commit()
}

// cut is how many rows of the record id (of n rows) lie below the line.
func cut(id, n, below int64) int64 {
	return min(max(below-(id-n+1), 0), n)
}

// Stats returns, from one snapshot, the number of rows present (kept in
// outbox_line.depth by every change of the rows, in its transaction:
// schema version 8), the head as Head reports it, and the CreatedAt of the
// record of the lowest position (zero when empty). A partition other than
// 0 is an error.
func (db *DB) Stats(ctx context.Context, partition int32) (outbox.Stats, error) {
	if err := checkPartition("stats", partition); err != nil {
		return outbox.Stats{}, err
	}
	st := outbox.Stats{Partition: Partition}
	var oldest sql.NullInt64
	err := db.r.QueryRowContext(ctx, `SELECT (SELECT depth FROM outbox_line), (`+headQuery+`),
		(SELECT created_at FROM outbox_messages ORDER BY id LIMIT 1)`).Scan(&st.Depth, &st.Head, &oldest)
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
