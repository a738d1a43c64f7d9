package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tetra-messenger/tetra/workload/history"
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
	return again(ctx, db, func(ctx context.Context) (int64, error) { return db.headOnce(ctx, partition) })
}

// headOnce is one try of Head.
func (db *DB) headOnce(ctx context.Context, partition int32) (int64, error) {
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

// The outbox keeps one record per message (table outbox_messages, schema
// version 8), listing the message's recipients in member order. The log's
// rows are the records' recipients: a record of n recipients holds the
// rows at positions id-n+1 .. id, so its id is its last row's position.
// Positions ascend in commit then member order, as when each row was a
// row of its own. A message of n members costs one record to insert and
// to delete, not n rows and n index entries.
//
// A DeleteBelow line can fall inside a record (some of its recipients
// acknowledged, some not): the record stays, and outbox_line.below keeps
// the line, under which Scan sees no row. The depth is the rows ever
// appended (outbox_appended.rows, moved by Commit) less those removed
// (outbox_line.removed, moved by DeleteBelow and PurgeHistory), each moved
// in the transaction that changes the rows. DeleteBelow and PurgeHistory
// take the line's row lock first, so two of them never count against
// different lines; Commit never takes it, so it never waits for GC.

// scanQuery is the outbox scan: a range of the records' primary key from
// the record holding the first row above $1, each joined by key to its
// history row, with the line.
const scanQuery = `SELECT o.id, o.n, o.recipients, o.created_at, (SELECT below FROM outbox_line WHERE id = 1),
	       ` + messageColumns + `
	FROM outbox_messages AS o JOIN history AS h ON h.id = o.history_id
	WHERE o.id > $1 ORDER BY o.id LIMIT $2`

// Scan returns up to limit committed rows with position above after, in
// position order, each joined with its history row: a forward range read
// of the records' primary key plus one keyed lookup into history per
// record; rows under the line of the last DeleteBelow are skipped.
// Positions are drawn under the append lock, held until the drawing
// transaction's commit is visible, so a row committed later never has a
// lower position than one already returned. limit < 1 and partitions other
// than 0 are errors; store failures wrap outbox.ErrUnavailable.
func (db *DB) Scan(ctx context.Context, partition int32, after int64, limit int) ([]outbox.Row, error) {
	return again(ctx, db, func(ctx context.Context) ([]outbox.Row, error) { return db.scanOnce(ctx, partition, after, limit) })
}

// scanOnce is one try of Scan.
func (db *DB) scanOnce(ctx context.Context, partition int32, after int64, limit int) ([]outbox.Row, error) {
	if err := checkPartition("scan", partition); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, fmt.Errorf("postgres: outbox scan: limit %d, want at least 1", limit)
	}
	// Every record read has a row above after, so limit records hold
	// limit rows, but for the one the line cuts: one more. A record holds
	// a row per recipient, so in big groups far fewer do: the records are
	// read in pages, the first of at most scanFirstRecords, each next one
	// sized by the rows per record seen so far.
	var out []outbox.Row
	from, recs := after, int64(min(limit+1, scanFirstRecords))
	for {
		got, rowsSeen, last, err := db.scanPage(ctx, &out, limit, after, from, recs)
		if err != nil {
			return nil, logUnavailable("scan", err)
		}
		if len(out) >= limit || got < recs {
			break
		}
		perRecord := max(rowsSeen/got, 1)
		from, recs = last, min(int64(limit+1), int64(limit-len(out))/perRecord+1)
	}
	if out == nil {
		out = []outbox.Row{}
	}
	return out, nil
}

// scanFirstRecords is the most records Scan reads in its first page.
const scanFirstRecords = 256

// scanPage reads up to recs records above the record id from, appending
// their rows above after to *out until it holds limit, and returns how
// many records it read, how many rows they held and the last one's id.
func (db *DB) scanPage(ctx context.Context, out *[]outbox.Row, limit int, after, from, recs int64) (got, rowsSeen, last int64, err error) {
	rows, err := db.pool.Query(ctx, scanQuery, from, recs)
	if err != nil {
		return 0, 0, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var m history.Message
		var to []string
		var id, created, below int64
		var n int32
		dest, done := messageDest(&m)
		err := rows.Scan(append([]any{&id, &n, &to, &created, &below}, dest...)...)
		done()
		if err != nil {
			return 0, 0, 0, err
		}
		if len(to) != int(n) {
			return 0, 0, 0, fmt.Errorf("record %d: %d recipients for n = %d", id, len(to), n)
		}
		got, rowsSeen, last = got+1, rowsSeen+int64(n), id
		*out = storecore.AppendRecordRows(*out, limit, id, to, after, below, m, fromNanos(created))
		if len(*out) >= limit {
			break
		}
	}
	rows.Close()
	return got, rowsSeen, last, rows.Err()
}

// deleteChunk is the most positions one DeleteBelow transaction covers:
// a prefix of tens of thousands of rows deleted at once would hold the
// line's row lock, and the purges behind it, for as long.
const deleteChunk = 2000

// cutSQL is how many of the rows of the record (id, n) lie below the
// line below, as an SQL expression over the three columns named.
func cutSQL(id, n, below string) string {
	return fmt.Sprintf("least(greatest(%s - (%s - %s + 1), 0), %s)", below, id, n, n)
}

// lockLineSQL takes the line's row lock for the rest of the transaction.
const lockLineSQL = `SELECT below FROM outbox_line WHERE id = 1 FOR UPDATE`

// DeleteBelow deletes every outbox row with position below pos (a prefix)
// and returns how many it deleted: the records wholly below pos, in
// transactions of at most deleteChunk positions, then, when pos falls
// inside a record, the line that hides that record's rows below it.
// Positions are never reused afterwards. A partition other than 0 is an
// error; store failures wrap outbox.ErrUnavailable, and the rows deleted
// before the failure stay deleted (all below pos: reclaimable anyway).
// While the process holds the instance lock (LockInstance), each statement
// deletes only if the lock's session still holds it and no process of
// another namespace or fleet uses the database; otherwise it deletes
// nothing and the error wraps outbox.ErrUnavailable and ErrLockLost.
func (db *DB) DeleteBelow(ctx context.Context, partition int32, pos int64) (int64, error) {
	if err := checkPartition("delete", partition); err != nil {
		return 0, err
	}
	guard, args := "true", []any{}
	if l := db.inst.Load(); l != nil {
		guard, args = deleteGuardSQL, l.guardArgs()
	}
	p, chunk := len(args)+1, len(args)+2
	records := fmt.Sprintf(`WITH g AS (SELECT %s AS ok),
		d AS (DELETE FROM outbox_messages WHERE id < $%d
			AND id < (SELECT min(id) FROM outbox_messages) + $%d AND (SELECT ok FROM g)
			RETURNING id, n),
		x AS (SELECT coalesce(sum(d.n - %s), 0) AS rows, count(*) AS records
			FROM d CROSS JOIN outbox_line AS l WHERE l.id = 1),
		u AS (UPDATE outbox_line SET removed = removed + (SELECT rows FROM x)
			WHERE id = 1 AND (SELECT records FROM x) > 0)
		SELECT (SELECT ok FROM g), rows, records FROM x`, guard, p, chunk, cutSQL("d.id", "d.n", "l.below"))
	var total int64
	for {
		var ok bool
		var n, recs int64
		err := db.inLineLock(ctx, records, append(args, pos, int64(deleteChunk)), &ok, &n, &recs)
		if err == nil && !ok {
			err = errLockLost
		}
		if err != nil {
			return total, logUnavailable("delete", err)
		}
		total += n
		if recs == 0 {
			break
		}
	}
	// The oldest record left, when pos falls inside it: the line moves up
	// to pos (never down), hiding the record's rows below it. Every record
	// below pos is gone, and new ones are drawn above the head, so it is
	// the only record with rows below pos.
	line := fmt.Sprintf(`WITH g AS (SELECT %s AS ok),
		c AS (SELECT o.id, o.n, l.below FROM outbox_messages AS o CROSS JOIN outbox_line AS l
			WHERE l.id = 1 AND o.id >= $%d ORDER BY o.id LIMIT 1),
		x AS (SELECT coalesce((SELECT CASE WHEN c.id - c.n + 1 < $%d AND c.below < $%d
			THEN ($%d - (c.id - c.n + 1)) - %s ELSE 0 END FROM c), 0) AS rows),
		u AS (UPDATE outbox_line SET below = $%d, removed = removed + (SELECT rows FROM x)
			WHERE id = 1 AND (SELECT rows FROM x) > 0 AND (SELECT ok FROM g))
		SELECT (SELECT ok FROM g), rows, 0::bigint FROM x`, guard, p, p, p, p, cutSQL("c.id", "c.n", "c.below"), p)
	var ok bool
	var n, unused int64
	err := db.inLineLock(ctx, line, append(args, pos), &ok, &n, &unused)
	if err == nil && !ok {
		err = errLockLost
	}
	if err != nil {
		return total, logUnavailable("delete", err)
	}
	return total + n, nil
}

// errLockLost is DeleteBelow's error when its guard refused (see
// DeleteBelow).
var errLockLost = fmt.Errorf("%w, or another tetra process of another --index-prefix or fleet uses the database: deleting nothing until the lock is held alone again", ErrLockLost)

// inLineLock runs the query q in a transaction that first takes the
// line's row lock, in one pipelined round trip, and scans its one row
// into dest.
func (db *DB) inLineLock(ctx context.Context, q string, args []any, dest ...any) error {
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	b.Queue(lockLineSQL)
	b.Queue(q, args...)
	b.Queue(`COMMIT`)
	br := db.pool.SendBatch(ctx, b)
	err := func() error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		if err := br.QueryRow().Scan(dest...); err != nil {
			return err
		}
		return commitTag(br.Exec())
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// Stats returns, from one statement, the number of rows present (the rows
// appended less those removed, each counted by every change of the rows,
// in its transaction: schema version 8), the head as Head reports it (after the same shared
// append lock), and the CreatedAt of the record of the lowest position
// (zero when empty). A partition other than 0 is an error.
func (db *DB) Stats(ctx context.Context, partition int32) (outbox.Stats, error) {
	return again(ctx, db, func(ctx context.Context) (outbox.Stats, error) { return db.statsOnce(ctx, partition) })
}

// statsOnce is one try of Stats.
func (db *DB) statsOnce(ctx context.Context, partition int32) (outbox.Stats, error) {
	if err := checkPartition("stats", partition); err != nil {
		return outbox.Stats{}, err
	}
	b := &pgx.Batch{}
	b.Queue(lockSharedSQL, AppendLockKey)
	b.Queue(`SELECT (SELECT rows FROM outbox_appended WHERE id = 1) - (SELECT removed FROM outbox_line WHERE id = 1), (` + headSQL + `),
		(SELECT created_at FROM outbox_messages ORDER BY id LIMIT 1)`)
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
	return again(ctx, db, func(ctx context.Context) (string, error) { return db.iDOnce(ctx) })
}

// iDOnce is one try of ID.
func (db *DB) iDOnce(ctx context.Context) (string, error) {
	var id string
	if err := db.pool.QueryRow(ctx, `SELECT value FROM tetra_meta WHERE key = 'outbox_id'`).Scan(&id); err != nil {
		return "", logUnavailable("outbox id", err)
	}
	return "postgres:" + id, nil
}
