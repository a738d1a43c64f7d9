package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// maxRows bounds the rows (or keys) one statement of a manyStmt names:
// 256 rows of 8 parameters stay well under SQLite's parameter limit. It is
// a power of two (see manyStmt).
const maxRows = 256

// manyStmt is one statement over a list of rows (VALUES rows to insert, or
// keys to look up), prepared on the writer in forms of 1, 2, 4, ...
// maxRows rows. n rows run as the fewest forms that add up to n (36 as 32
// and 4), so a commit parses no SQL, and no more than log2(maxRows)+1
// statements run per maxRows rows. They are prepared at Open: the writer's
// single connection cannot prepare while a transaction holds it.
type manyStmt struct {
	per    int // parameters per row
	byRows map[int]*sql.Stmt
}

// prepareMany prepares the forms of a statement: text(list) is its SQL
// with list the n-row list, row repeated n times, comma-separated; per is
// the number of parameters in row.
func prepareMany(ctx context.Context, pool *sql.DB, per int, row string, text func(list string) string) (*manyStmt, error) {
	m := &manyStmt{per: per, byRows: map[int]*sql.Stmt{}}
	for n := 1; n <= maxRows; n *= 2 {
		st, err := pool.PrepareContext(ctx, text(row+strings.Repeat(", "+row, n-1)))
		if err != nil {
			return m, err
		}
		m.byRows[n] = st
	}
	return m, nil
}

// chunks calls f with each form's row count and its slice of args, in
// order, until f fails.
func (m *manyStmt) chunks(n int, args []any, f func(k int, st *sql.Stmt, args []any) error) error {
	if len(args) != n*m.per {
		return fmt.Errorf("sqlite: %d parameters for %d rows of %d", len(args), n, m.per)
	}
	for n > 0 {
		k := maxRows
		for k > n {
			k /= 2
		}
		if err := f(k, m.byRows[k], args[:k*m.per]); err != nil {
			return err
		}
		args, n = args[k*m.per:], n-k
	}
	return nil
}

// insert inserts n rows (args in row order) in tx, which get consecutive
// AUTOINCREMENT ids from firstID on, and fails unless every one was stored
// with the id planned (insertIDs' checks).
func (m *manyStmt) insert(ctx context.Context, tx *sql.Tx, n int, args []any, firstID int64) error {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = firstID + int64(i)
	}
	return m.insertIDs(ctx, tx, args, ids)
}

// insertIDs inserts len(ids) rows (args in row order) in tx, ids[i] the
// id row i is planned to get (given in args, or assigned by SQLite),
// ascending, and fails unless every one was stored so (each statement's
// count and last id are checked).
func (m *manyStmt) insertIDs(ctx context.Context, tx *sql.Tx, args []any, ids []int64) error {
	done := 0
	return m.chunks(len(ids), args, func(k int, st *sql.Stmt, args []any) error {
		res, err := tx.StmtContext(ctx, st).ExecContext(ctx, args...)
		if err != nil {
			return err
		}
		got, err := res.RowsAffected()
		if err != nil || got != int64(k) {
			return fmt.Errorf("%d of %d rows stored (%v)", got, k, err)
		}
		done += k
		if last, err := res.LastInsertId(); err != nil || last != ids[done-1] {
			return fmt.Errorf("rows stored up to id %d, planned %d (%v)", last, ids[done-1], err)
		}
		return nil
	})
}

// query runs the lookup for n keys (args in key order) in tx and calls scan
// on each row found.
func (m *manyStmt) query(ctx context.Context, tx *sql.Tx, n int, args []any, scan func(*sql.Rows) error) error {
	return m.chunks(n, args, func(_ int, st *sql.Stmt, args []any) error {
		rows, err := tx.StmtContext(ctx, st).QueryContext(ctx, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	})
}

// close closes every form.
func (m *manyStmt) close() error {
	var errs []error
	for _, st := range m.byRows {
		errs = append(errs, st.Close())
	}
	return errors.Join(errs...)
}
