package sqlite

import (
	"database/sql"
	"strings"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/store/storecore"
)

// Edits and deletes in Commit (PROTOCOL.md §7.3, history.CommitPlan): a
// branch of the commit taken only by batches that hold one, so ordinary
// messages pay nothing for it. The targets are read inside the write
// transaction (the store has one writer, so they cannot change before
// the updates), and the updates run in it after the inserts.

// messageColumns is storecore.MessageColumns, the order scanMessage reads.
const messageColumns = storecore.MessageColumns

// scanMessage scans messageColumns into a history.Message
// (storecore.MessageDest).
func scanMessage(rows interface{ Scan(...any) error }) (history.Message, error) {
	var m history.Message
	dest, done := storecore.MessageDest(&m)
	err := rows.Scan(dest...)
	done()
	return m, err
}

// setKind is storecore.SetKind: the edit and delete fields of m from
// their columns.
func setKind(m *history.Message, kind int, ref string, editedAt int64, deleted bool) {
	storecore.SetKind(m, kind, ref, editedAt, deleted)
}

// readTargets reads the messages ids names (the targets, and the
// messages under the batch's keys) into k.Targets, and who may
// delete any message of their chats into k.Admin: a group's admins as the
// members table holds them in this transaction (admin_at > 0, migration
// 0004; PROTOCOL.md §7.5).
func (c *committer) readTargets(ids []string, k *history.Known) error {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := c.tx.QueryContext(c.ctx, `SELECT `+messageColumns+`, ch.kind,
		(SELECT group_concat(m.user_id, char(10)) FROM members AS m WHERE m.chat_id = h.chat_id AND m.admin_at > 0)
		FROM history AS h JOIN chats AS ch ON ch.id = h.chat_id
		WHERE h.message_id IN (?`+strings.Repeat(", ?", len(ids)-1)+`)`, args...)
	if err != nil {
		return unavailable("commit: targets", err)
	}
	defer rows.Close()
	t := storecore.NewTargets(k)
	var m history.Message
	var chatKind string
	var groupAdmins sql.NullString
	dest, done := storecore.MessageDest(&m)
	dest = append(dest, &chatKind, &groupAdmins)
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return unavailable("commit: targets", err)
		}
		done()
		var admins []string
		if groupAdmins.Valid {
			// User ids hold no control characters (validUser).
			admins = strings.Split(groupAdmins.String, "\n")
		}
		t.Add(m, chatKind, admins)
	}
	if err := rows.Err(); err != nil {
		return unavailable("commit: targets", err)
	}
	t.Done()
	return nil
}

// apply writes what the committed edits and deletes do (history.Apply):
// their own kind and ref, then the original's new body and edited_at, or
// for a delete the erasure of the original's body and its edits' bodies.
// The rows are updated in place; with secure_delete (Config, always on)
// SQLite overwrites the text it frees in the database file, and a WAL
// checkpoint drops the old pages from the -wal file (docs/design.md,
// "Edit and delete").
func (c *committer) apply(applies []history.Apply) error {
	exec := func(q string, args ...any) error {
		_, err := c.tx.ExecContext(c.ctx, q, args...)
		return err
	}
	for _, a := range applies {
		err := exec(`UPDATE history SET kind = ?, ref = ? WHERE id = ?`, a.Kind, a.Ref, a.Seq)
		if err == nil && a.Kind == history.KindEdit {
			err = exec(`UPDATE history SET body = ?, edited_at = ? WHERE id = ? AND deleted = 0`, a.Body, nanos(a.At), a.Target)
		}
		if err == nil && a.Kind == history.KindDelete {
			err = exec(`UPDATE history SET body = '', edited_at = 0, deleted = 1 WHERE id = ?`, a.Target)
			if err == nil {
				// kind <> 0 lets SQLite use the partial index history_ref.
				err = exec(`UPDATE history SET body = '' WHERE ref = ? AND kind <> 0 AND kind = 1`, a.Ref)
			}
		}
		if err != nil {
			return unavailable("commit: apply an edit or delete", err)
		}
	}
	return nil
}
