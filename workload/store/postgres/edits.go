package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/store/storecore"
)

// Edits and deletes in Commit (PROTOCOL.md §7.3, history.CommitPlan): a
// branch of the commit taken only by batches that hold one, so ordinary
// messages pay nothing for it. Such a batch takes the append lock
// (AppendLockKey) before it reads its targets, so no other process's
// commit can edit or delete them between the read and the write (the
// lock is held to the end of the transaction; write takes it again,
// which costs nothing). The updates are queued in write's batch, after
// the insert and before COMMIT, and apply only to edits and deletes the
// insert stored (an attempt whose insert stored nothing changes nothing).

// messageColumns is storecore.MessageColumns, the order messageDest
// reads.
const messageColumns = storecore.MessageColumns

// messageDest is storecore.MessageDest: the scan destinations of
// messageColumns for m, and a func that completes m after the scan.
func messageDest(m *history.Message) ([]any, func()) { return storecore.MessageDest(m) }

// setKind is storecore.SetKind: the edit and delete fields of m from
// their columns.
func setKind(m *history.Message, kind int, ref string, editedAt int64, deleted bool) {
	storecore.SetKind(m, kind, ref, editedAt, deleted)
}

// scanMessageRow scans messageColumns.
func scanMessageRow(row pgx.CollectableRow) (history.Message, error) {
	var m history.Message
	dest, done := messageDest(&m)
	err := row.Scan(dest...)
	done()
	return m, err
}

// targetsQuery reads the messages $1 and, for each, its chat's kind and
// admins (members with admin_at > 0, migration 0004; PROTOCOL.md §7.5),
// who may delete any message of the group.
const targetsQuery = `SELECT ` + messageColumns + `, c.kind,
		ARRAY(SELECT m.user_id FROM members AS m WHERE m.chat_id = h.chat_id AND m.admin_at > 0)
	FROM history AS h JOIN chats AS c ON c.id = h.chat_id
	WHERE h.message_id = ANY($1::text[])`

// readTargets takes the append lock and reads the targets of r.plan's
// edits and deletes into k.
func (r *commitRun) readTargets(ctx context.Context, conn *pgxpool.Conn, k *history.Known) error {
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, AppendLockKey); err != nil {
		return unavailable("commit: append lock", err)
	}
	ids := r.plan.Refs()
	for _, m := range k.Committed {
		ids = append(ids, m.ID)
	}
	rows, err := conn.Query(ctx, targetsQuery, ids)
	if err != nil {
		return unavailable("commit: targets", err)
	}
	t := storecore.NewTargets(k)
	var m history.Message
	var chatKind string
	var groupAdmins []string
	dest, done := messageDest(&m)
	_, err = pgx.ForEachRow(rows, append(dest, &chatKind, &groupAdmins), func() error {
		done()
		t.Add(m, chatKind, groupAdmins)
		return nil
	})
	if err != nil {
		return unavailable("commit: targets", err)
	}
	t.Done()
	return nil
}

// applyInput is the edits and deletes this transaction's insert stored
// (history.Apply, arrays in step: $1 message ids, $2 kinds, $3 refs, $4
// bodies, $5 SentAts); an attempt whose insert stored nothing matches
// nothing.
const applyInput = `WITH a AS (
		SELECT x.* FROM unnest($1::text[], $2::smallint[], $3::text[], $4::text[], $5::bigint[])
			WITH ORDINALITY AS x(message_id, kind, ref, body, at, ord)
		WHERE EXISTS (SELECT 1 FROM history AS h WHERE h.message_id = x.message_id)
	) `

// applySQL are the statements, run in order, that write what the edits
// and deletes do: their own kind and ref; for an edit the original's body
// and edited_at (the newest edit of the batch per original; never on a
// deleted original); for a delete the original's body set to ” and
// deleted, then the bodies of its edits set to ”.
var applySQL = []string{
	applyInput + `UPDATE history AS h SET kind = a.kind, ref = a.ref FROM a WHERE h.message_id = a.message_id`,
	applyInput + `, e AS (SELECT DISTINCT ON (ref) ref, body, at FROM a WHERE kind = 1 ORDER BY ref, ord DESC)
		UPDATE history AS h SET body = e.body, edited_at = e.at FROM e WHERE h.message_id = e.ref AND NOT h.deleted`,
	applyInput + `UPDATE history AS h SET body = '', edited_at = 0, deleted = true
		WHERE h.message_id IN (SELECT ref FROM a WHERE kind = 2)`,
	applyInput + `UPDATE history AS h SET body = ''
		WHERE h.kind <> 0 AND h.kind = 1 AND h.ref IN (SELECT ref FROM a WHERE kind = 2)`,
}

// queueApply queues applySQL for r.plan's edits and deletes in b.
func (r *commitRun) queueApply(b *pgx.Batch) int {
	var ids, refs, bodies []string
	var kinds []int16
	var ats []int64
	for _, i := range r.plan.Inserts {
		m := r.plan.Results[i].Message
		if m.Kind() == history.KindMessage {
			continue
		}
		ids, refs, bodies = append(ids, m.ID), append(refs, m.Ref()), append(bodies, m.Body)
		kinds, ats = append(kinds, int16(m.Kind())), append(ats, nanos(m.SentAt))
	}
	for _, q := range applySQL {
		b.Queue(q, ids, kinds, refs, bodies, ats)
	}
	return len(applySQL)
}
