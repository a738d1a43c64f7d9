package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetra-messenger/tetra/workload/history"
)

// readFirstAfterLoss is how many Commits read first (no optimistic
// attempt) after an optimistic attempt lost its bet.
const readFirstAfterLoss = 32

// maxCommitAttempts bounds how often Commit starts over when the membership
// epoch moved, or another transaction took a key or message id, between
// its reads and its writes.
const maxCommitAttempts = 8

// Commit stores drafts in one transaction. For each draft in order: a draft
// that history.CheckDraft refuses (a missing or over-long id, NUL or invalid
// UTF-8 in any text, a control character in the sender) or without a
// storable SentAt (years 1678 to 2262) gets ErrInvalid; a (SenderID,
// CorrelationID) already in history, committed earlier or earlier in this
// batch, gets Duplicate with the original message when the draft names the
// original's chat and body, and ErrInvalid when it names another chat or
// body (history.CheckResend); an unknown chat gets ErrNotFound, a
// sender outside the chat ErrNotMember, a message id already used
// ErrInvalid; otherwise the history row is inserted (its id is the Seq) and,
// when Config.Outbox is on, one outbox row per member in member order (the
// sender included; one record holds them, at consecutive positions), each
// CreatedAt the commit time. Per-draft errors store
// nothing for that draft and do not fail the batch. Any other failure rolls
// the whole batch back and returns an error wrapping history.ErrUnavailable.
// Results carry SentAt in UTC as stored. An empty batch returns an empty
// slice without touching the database.
//
// The common batch, new messages from members of chats whose member lists
// are cached, costs one round trip (commitRun.optimistic): BEGIN, the
// append lock (AppendLockKey), one statement inserting every history row
// and every outbox row, and COMMIT, pipelined; the unique keys refuse a
// taken key or id, and the attempt then starts over as below. Otherwise
// the transaction costs two round trips whatever the batch size: the first
// opens it and reads the membership epoch, the keys and message ids already
// used, and the member lists not cached; the second takes the append lock
// (AppendLockKey), inserts every history row and every outbox row with one
// statement, and commits. The lock is held for that second round trip only.
// A third is needed when member lists are missing after the first (the
// chats of duplicates, or every list after a membership change), and a
// batch of duplicates and rule violations only ends with a ROLLBACK
// instead of the second.
// The insert checks that the membership epoch has not moved since the
// member lists were read; if it has (a member was added meanwhile), or
// another transaction took a key or message id in between, nothing is
// written and Commit starts over. An attempt that fails because the
// database ended the pooled connection's session (a restart, a failover,
// pg_terminate_backend; most often while the connection sat idle in the
// pool) is tried once more, on a connection the pool pings first
// (DB.noteLost), so such an event fails no batch on its own.
func (db *DB) Commit(ctx context.Context, drafts []history.Draft) ([]history.Result, error) {
	return db.commit(ctx, drafts, nil)
}

// commitHooks are pause points for tests; production passes nil.
type commitHooks struct {
	// afterRead runs with its reads done, before the write round trip (so
	// before the append lock): with the transaction open after the reads
	// of a reading attempt, with none open yet in an optimistic one.
	afterRead func(ctx context.Context)
	// beforeCommit runs with the lock held and the rows inserted, before
	// COMMIT, which then goes in a round trip of its own.
	beforeCommit func(ctx context.Context)
	// afterCommit, when not empty, is a statement queued after COMMIT in
	// the write round trip (a session that ends right after COMMIT).
	afterCommit string
}

func (db *DB) commit(ctx context.Context, drafts []history.Draft, hooks *commitHooks) ([]history.Result, error) {
	if len(drafts) == 0 {
		return []history.Result{}, nil
	}
	optimistic := db.readFirst.Load() == 0
	if !optimistic {
		db.readFirst.Add(-1)
	}
	retried := false
	for attempt := 1; ; attempt++ {
		results, again, err := db.commitOnce(ctx, drafts, hooks, optimistic)
		if err != nil && !retried && ctx.Err() == nil && errors.Is(err, errConnLost) {
			// The pooled connection was dead (its session ended while it
			// sat idle: a restart, a failover, pg_terminate_backend). Try
			// once more on a connection the pool pings first. If the
			// first try did commit (the session ended after COMMIT), the
			// second finds its keys and reports Duplicate with the
			// originals, as for a client's resend (history.CheckResend).
			retried = true
			db.commitRetries.Add(1)
			continue
		}
		if optimistic && again {
			// The bet was lost (a resend, most likely, when clients
			// reconnect and replay their sends): the next commits read
			// first, instead of each taking the append lock, drawing ids
			// and rolling back before it reads.
			db.readFirst.Store(readFirstAfterLoss)
		}
		if err != nil || !again {
			return results, err
		}
		optimistic = false
		if attempt == maxCommitAttempts {
			return nil, unavailable("commit", fmt.Errorf("memberships or keys kept changing during %d attempts", attempt))
		}
	}
}

// commitRun is the state of one attempt of a Commit: what it read and the
// plan (history.CommitPlan, the rules every store shares) it decided.
type commitRun struct {
	db   *DB
	plan *history.CommitPlan

	epoch   int64
	members map[string][]string // chat id -> sorted members; unknown chats are absent
	byKey   map[history.Key]history.Message
	usedIDs map[string]bool // message ids in history
}

// commitOnce runs one attempt. again reports that the attempt wrote nothing
// because the world moved between its reads and its writes, or because an
// optimistic attempt lost its bet (see optimistic).
func (db *DB) commitOnce(ctx context.Context, drafts []history.Draft, hooks *commitHooks, optimistic bool) (results []history.Result, again bool, err error) {
	r := &commitRun{db: db, plan: history.NewCommitPlan(drafts)}
	if !r.plan.Valid() {
		return r.plan.Results, false, nil
	}
	if optimistic && !r.plan.HasRefs() && r.cached() {
		return r.optimistic(ctx, hooks)
	}
	// What to read: chats, keys and ids of the drafts that pass their own
	// checks.
	chats, ids := r.plan.Chats(), r.plan.IDs()
	var senders, correlations []string
	for _, k := range r.plan.Keys() {
		senders = append(senders, k.Sender)
		correlations = append(correlations, k.Correlation)
	}

	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return nil, false, unavailable("commit", err)
	}
	defer conn.Release()
	defer rollback(conn) // a no-op once committed
	defer db.noteLost(ctx, conn, &err)

	if err := r.read(ctx, conn, chats, senders, correlations, ids); err != nil {
		return nil, false, err
	}
	if hooks != nil && hooks.afterRead != nil {
		hooks.afterRead(ctx)
	}
	known := history.Known{Members: r.members, Committed: r.byKey, UsedIDs: r.usedIDs}
	if r.plan.HasRefs() { // edits and deletes only (edits.go)
		if err := r.readTargets(ctx, conn, &known); err != nil {
			return nil, false, err
		}
	}
	r.plan.Decide(known)
	if len(r.plan.Inserts) == 0 {
		// Nothing to write: duplicates and rule violations only. The
		// deferred rollback ends the read-only transaction.
		return r.plan.Results, false, nil
	}
	again, err = r.write(ctx, conn, hooks, false)
	if err != nil || again {
		return nil, again, err
	}
	return r.plan.Finish(), false, nil
}

// cached reports whether the member list of every chat of the plan is in
// the cache, and if so takes them, with the cache's epoch, as what an
// optimistic attempt knows.
func (r *commitRun) cached() bool {
	chats := r.plan.Chats()
	epoch, lists := r.db.cache.Lookup(chats)
	if len(lists) != len(chats) {
		return false
	}
	r.epoch, r.members = epoch, lists
	r.byKey, r.usedIDs = map[history.Key]history.Message{}, map[string]bool{}
	return true
}

// optimistic is an attempt that bets on the common batch: new messages
// from members of chats whose member lists are cached (cached). It reads
// nothing, so a Commit is one round trip: the write opens the transaction
// itself, the insert checks the cache's epoch as it checks the one read
// otherwise, and the unique keys on history (message_id, and sender_id with
// correlation_id) refuse a taken key or id instead of the lookups read
// would run (two index probes per message, and a round trip per batch).
// The bet is lost, with nothing written, when the plan refuses a draft (a
// resend is refused as a duplicate key only once its original is read), a
// key or id turns out taken, or the epoch moved; the attempt then reports
// again and Commit tries once more with every read, as do the next
// readFirstAfterLoss Commits. The cost of a lost bet is a round trip
// holding the append lock and the ids it drew; a member change anywhere
// makes each process lose one (the epoch moved). The pause points run
// as in a reading attempt: afterRead before the write round trip (with no
// transaction open yet), beforeCommit before its COMMIT.
func (r *commitRun) optimistic(ctx context.Context, hooks *commitHooks) (results []history.Result, again bool, err error) {
	valid := make([]bool, len(r.plan.Results))
	for i, res := range r.plan.Results {
		valid[i] = res.Err == nil
	}
	r.plan.Decide(history.Known{Members: r.members, Committed: r.byKey, UsedIDs: r.usedIDs})
	for i, res := range r.plan.Results {
		if valid[i] && res.Err != nil {
			return nil, true, nil
		}
	}
	conn, err := r.db.pool.Acquire(ctx)
	if err != nil {
		return nil, false, unavailable("commit", err)
	}
	defer conn.Release()
	defer rollback(conn) // a no-op once committed
	defer r.db.noteLost(ctx, conn, &err)
	if hooks != nil && hooks.afterRead != nil {
		hooks.afterRead(ctx)
	}
	again, err = r.write(ctx, conn, hooks, true)
	if err != nil || again {
		return nil, again, err
	}
	return r.plan.Finish(), false, nil
}

// read is the first round trip: BEGIN and the reads, in one pipelined
// batch. The epoch is read first, so member lists read after it are at
// least as new as it. Member lists missing after that (chats of
// duplicates, or every list when the epoch moved past the cache) cost one
// more round trip.
func (r *commitRun) read(ctx context.Context, conn *pgxpool.Conn, chats, senders, correlations, ids []string) error {
	cacheEpoch, cached := r.db.cache.Lookup(chats)
	var uncached []string
	for _, c := range chats {
		if _, ok := cached[c]; !ok {
			uncached = append(uncached, c)
		}
	}
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	b.Queue(`SELECT epoch FROM membership_epoch WHERE id = 1`)
	b.Queue(keysQuery, senders, correlations)
	b.Queue(usedIDsQuery, ids)
	if len(uncached) > 0 {
		b.Queue(membersQuery, uncached)
	}
	br := conn.SendBatch(ctx, b)
	err := func() error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		if err := br.QueryRow().Scan(&r.epoch); err != nil {
			return err
		}
		rows, _ := br.Query()
		// With kind and ref: a resend must match an edit or delete as
		// such (history.CheckResend; PROTOCOL.md §7.3). Rows come back
		// for resends only.
		msgs, err := pgx.CollectRows(rows, scanMessageRow)
		if err != nil {
			return err
		}
		r.byKey = make(map[history.Key]history.Message, len(msgs))
		for _, m := range msgs {
			r.byKey[history.Key{Sender: m.SenderID, Correlation: m.CorrelationID}] = m
		}
		rows, _ = br.Query()
		used, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		r.usedIDs = make(map[string]bool, len(used))
		for _, id := range used {
			r.usedIDs[id] = true
		}
		r.members = map[string][]string{}
		if len(uncached) > 0 {
			if err := collectMembers(br, r.members); err != nil {
				return err
			}
		}
		return nil
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return unavailable("commit: read", err)
	}

	// Lists read at or after r.epoch may be cached under it. Cached lists
	// are usable when the cache was filled at r.epoch; a cache from a later
	// epoch holds lists at least as new, and the insert's epoch check sends
	// this attempt round again anyway.
	fetched := maps.Clone(r.members)
	if cacheEpoch >= r.epoch {
		for c, ms := range cached {
			if _, ok := r.members[c]; !ok {
				r.members[c] = ms
			}
		}
	}
	// Chats queried already and not found are unknown; ask only for the
	// others.
	var missing []string
	need := func(c string) {
		if _, ok := r.members[c]; !ok && !slices.Contains(uncached, c) && !slices.Contains(missing, c) {
			missing = append(missing, c)
		}
	}
	for _, c := range chats {
		need(c)
	}
	for _, m := range r.byKey {
		need(m.ChatID)
	}
	if len(missing) > 0 {
		rows, err := conn.Query(ctx, membersQuery, missing)
		if err == nil {
			err = collectMemberRows(rows, r.members)
		}
		if err != nil {
			return unavailable("commit: members", err)
		}
		for _, c := range missing {
			fetched[c] = r.members[c]
		}
	}
	r.db.cache.Store(r.epoch, fetched)
	return nil
}

// keysQuery finds the history rows of the idempotency keys ($1 senders, $2
// correlation ids, pairwise). Each key is one probe of the unique index:
// the LATERAL subquery with LIMIT 1 cannot be flattened into a join, so the
// plan stays a loop of index probes even after PostgreSQL switches the
// prepared statement (pgx caches them) to a generic plan, planned without
// the arrays. As a plain join, and message_id = ANY($1) for usedIDsQuery,
// the generic plans scanned history, so every commit got slower as history
// grew: the read round trip took 2.6 ms per batch of 36 at 3,600 history
// rows and 22 ms at 21,600; as probes it stays at 0.5 ms
// (TestCommitReadsProbeTheIndex checks the generic plans).
const keysQuery = `SELECT ` + messageColumns + `
	FROM unnest($1::text[], $2::text[]) AS k(sender_id, correlation_id)
	CROSS JOIN LATERAL (SELECT * FROM history AS h
		WHERE h.sender_id = k.sender_id AND h.correlation_id = k.correlation_id LIMIT 1) AS h`

// usedIDsQuery returns which of the message ids $1 are in history, one
// index probe per id (LATERAL ... LIMIT 1, as in keysQuery).
const usedIDsQuery = `SELECT h.message_id FROM unnest($1::text[]) AS k(id)
	CROSS JOIN LATERAL (SELECT message_id FROM history AS h WHERE h.message_id = k.id LIMIT 1) AS h`

// membersQuery lists the members of the chats $1, sorted; a chat that
// exists without members comes back once with a NULL member.
const membersQuery = `SELECT c.id, m.user_id
	FROM chats AS c LEFT JOIN members AS m ON m.chat_id = c.id
	WHERE c.id = ANY($1::text[]) ORDER BY c.id, m.user_id`

func collectMembers(br pgx.BatchResults, into map[string][]string) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	return collectMemberRows(rows, into)
}

// collectMemberRows reads membersQuery rows into into: an empty, non-nil
// list for a chat without members. Chats not returned are unknown and stay
// absent.
func collectMemberRows(rows pgx.Rows, into map[string][]string) error {
	defer rows.Close()
	for rows.Next() {
		var chat string
		var member *string
		if err := rows.Scan(&chat, &member); err != nil {
			return err
		}
		ms := into[chat]
		if ms == nil {
			ms = []string{}
		}
		if member != nil {
			ms = append(ms, *member)
		}
		into[chat] = ms
	}
	return rows.Err()
}

// insertSQL inserts the planned history rows and one outbox record per
// message (schema 8, migration 0008_outbox_messages.sql) in one statement,
// in draft order, so history ids grow in that order (volatile defaults are
// evaluated after the ORDER BY). $9 holds each message's number of
// recipients and $10 the running total up to and including it, over the
// recipients of the whole batch listed in $11 (message after message,
// each in member order), so a record's rows take the positions head + $10
// - $9 + 1 .. head + $10, its id the last, where head is outbox_id_seq's
// value. The statement runs under the append lock, so no other
// transaction draws meanwhile, and moves the sequence to the batch's last
// position with one setval (not undone by a rollback: a failed commit
// leaves a gap, never a reused position). outbox_appended.rows goes up by
// the rows added. Nothing is inserted when the membership epoch is no longer
// $8. The result lists kind 0 (history id, message id), kind 1 (record id,
// history id), kind 2 (the current epoch) and kind 3 (the head set).
const insertSQL = `WITH d AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[],
			$9::int[], $10::bigint[])
			WITH ORDINALITY AS x(message_id, chat_id, sender_id, sender_device, correlation_id, body, sent_at, n, upto, ord)
		WHERE (SELECT epoch FROM membership_epoch WHERE id = 1) = $8
	), h AS (
		INSERT INTO history (message_id, chat_id, sender_id, sender_device, correlation_id, body, sent_at)
		SELECT message_id, chat_id, sender_id, sender_device, correlation_id, body, sent_at FROM d ORDER BY ord
		RETURNING id, message_id
	), s AS (
		` + headSQL + `
	), o AS (
		INSERT INTO outbox_messages (id, history_id, recipients, n, created_at)
		SELECT (SELECT * FROM s) + d.upto, h.id, ($11::text[])[d.upto - d.n + 1 : d.upto], d.n, $12
		FROM d JOIN h ON h.message_id = d.message_id
		RETURNING id, n, history_id
	), l AS (
		UPDATE outbox_appended SET rows = rows + (SELECT sum(n) FROM o) WHERE id = 1 AND EXISTS (SELECT 1 FROM o)
	)
	SELECT 0, id, message_id, 0::bigint FROM h
	UNION ALL SELECT 1, id, '', history_id FROM o
	UNION ALL SELECT 2, epoch, '', 0 FROM membership_epoch WHERE id = 1
	UNION ALL SELECT 3, setval('outbox_id_seq', max(id)), '', 0 FROM o HAVING count(*) > 0`

// insertHistorySQL is insertSQL without outbox rows (Config.Outbox off):
// the same parameters $1 to $8.
const insertHistorySQL = `WITH d AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[])
			WITH ORDINALITY AS x(message_id, chat_id, sender_id, sender_device, correlation_id, body, sent_at, ord)
		WHERE (SELECT epoch FROM membership_epoch WHERE id = 1) = $8
	), h AS (
		INSERT INTO history (message_id, chat_id, sender_id, sender_device, correlation_id, body, sent_at)
		SELECT message_id, chat_id, sender_id, sender_device, correlation_id, body, sent_at FROM d ORDER BY ord
		RETURNING id, message_id
	)
	SELECT 0, id, message_id, 0::bigint FROM h
	UNION ALL SELECT 2, epoch, '', 0 FROM membership_epoch WHERE id = 1`

// write is the second round trip: the append lock, the insert and COMMIT,
// in one pipelined batch (after BEGIN when begin is set: an optimistic
// attempt opens its transaction here). again reports that nothing was
// written because the epoch moved or a key or message id was taken since
// read (or, optimistic, was taken at all).
func (r *commitRun) write(ctx context.Context, conn *pgxpool.Conn, hooks *commitHooks, begin bool) (again bool, err error) {
	inserts, results := r.plan.Inserts, r.plan.Results
	n := len(inserts)
	messageIDs := make([]string, n)
	chatIDs := make([]string, n)
	senders := make([]string, n)
	devices := make([]string, n)
	correlations := make([]string, n)
	bodies := make([]string, n)
	sentAts := make([]int64, n)
	// With the outbox: each message's recipient count, the running total
	// and every recipient, message after message (insertSQL).
	var counts []int32
	var upto []int64
	var recipients []string
	if r.db.cfg.Outbox {
		counts, upto = make([]int32, n), make([]int64, n)
	}
	for j, i := range inserts {
		m := results[i].Message
		messageIDs[j], chatIDs[j], senders[j], devices[j] = m.ID, m.ChatID, m.SenderID, m.SenderDevice
		correlations[j], bodies[j], sentAts[j] = m.CorrelationID, m.Body, nanos(m.SentAt)
		if r.db.cfg.Outbox {
			members := results[i].Members
			if len(members) == 0 {
				// A sender is a member (CommitPlan.Decide).
				return false, unavailable("commit", fmt.Errorf("message %s has no members", m.ID))
			}
			recipients = append(recipients, members...)
			counts[j], upto[j] = int32(len(members)), int64(len(recipients))
		}
	}
	createdAt := nanos(time.Now())

	b := &pgx.Batch{}
	if begin {
		b.Queue(`BEGIN`)
	}
	b.Queue(`SELECT pg_advisory_xact_lock($1)`, AppendLockKey)
	if r.db.cfg.Outbox {
		b.Queue(insertSQL, messageIDs, chatIDs, senders, devices, correlations, bodies, sentAts, r.epoch,
			counts, upto, recipients, createdAt)
	} else {
		b.Queue(insertHistorySQL, messageIDs, chatIDs, senders, devices, correlations, bodies, sentAts, r.epoch)
	}
	applies := 0
	if r.plan.HasRefs() { // edits and deletes only (edits.go)
		applies = r.queueApply(b)
	}
	pause := hooks != nil && hooks.beforeCommit != nil
	if !pause {
		b.Queue(`COMMIT`)
		if hooks != nil && hooks.afterCommit != "" {
			b.Queue(hooks.afterCommit)
		}
	}
	type out struct {
		kind int
		id   int64
		text string
		ref  int64
	}
	var outs []out
	committed := false // COMMIT answered COMMIT
	br := conn.SendBatch(ctx, b)
	err = func() error {
		if begin {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, _ := br.Query()
		var o out
		_, err := pgx.ForEachRow(rows, []any{&o.kind, &o.id, &o.text, &o.ref}, func() error {
			outs = append(outs, o)
			return nil
		})
		if err != nil {
			return err
		}
		for range applies {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		if !pause {
			if err := commitTag(br.Exec()); err != nil {
				return err
			}
			committed = true
		}
		return nil
	}()
	// Once COMMIT has answered, the batch is stored whatever Close meets
	// after it: the session may end before the batch's final
	// ReadyForQuery (a restart, pg_terminate_backend), and reporting the
	// batch failed would answer its senders with an error for messages
	// that are in history (PROTOCOL.md §3: a send that got an error was
	// not stored).
	if cerr := br.Close(); err == nil && !committed {
		err = cerr
	}
	if err == nil && pause {
		hooks.beforeCommit(ctx)
		err = commitTag(conn.Exec(ctx, `COMMIT`))
	}
	if pgCode(err) == codeUniqueViolation {
		// A key or message id was committed by another transaction between
		// read and write; the deferred rollback ends this one. Read again.
		return true, nil
	}
	if err != nil {
		return false, unavailable("commit: write", err)
	}

	seq := map[string]int64{}
	records := map[int64]int64{} // history id -> its record's id
	var lastRecord, head int64
	epoch := int64(-1)
	for _, o := range outs {
		switch o.kind {
		case 0:
			seq[o.text] = o.id
		case 1:
			records[o.ref] = o.id
			lastRecord = max(lastRecord, o.id)
		case 2:
			epoch = o.id
		case 3:
			head = o.id
		}
	}
	if head != lastRecord {
		return false, unavailable("commit", fmt.Errorf("the outbox head was set to %d, the last record is %d", head, lastRecord))
	}
	if epoch != r.epoch {
		// Members were added since the lists were read: nothing was
		// inserted (the empty transaction committed). Read again.
		if len(seq) != 0 {
			return false, unavailable("commit", fmt.Errorf("epoch moved from %d to %d but %d rows were inserted", r.epoch, epoch, len(seq)))
		}
		return true, nil
	}
	if len(seq) != n {
		return false, unavailable("commit", fmt.Errorf("%d history rows inserted, %d planned", len(seq), n))
	}
	for _, i := range inserts {
		res := results[i]
		sq := seq[res.Message.ID]
		var ds []history.Delivery
		if r.db.cfg.Outbox {
			// The record holds its members' rows, in member order, at
			// the positions up to its id (insertSQL).
			id, ok := records[sq]
			if !ok {
				return false, unavailable("commit", fmt.Errorf("message %s: no outbox record", res.Message.ID))
			}
			first := id - int64(len(res.Members)) + 1
			ds = make([]history.Delivery, len(res.Members))
			for j, m := range res.Members {
				ds[j] = history.Delivery{Recipient: m, Partition: Partition, Pos: first + int64(j)}
			}
		}
		r.plan.Inserted(i, sq, ds)
	}
	return false, nil
}

// errCommitRolledBack: COMMIT answered ROLLBACK, the transaction had failed.
var errCommitRolledBack = errors.New("commit: the transaction was rolled back")

// commitTag checks the outcome of a COMMIT.
func commitTag(tag interface{ String() string }, err error) error {
	if err != nil {
		return err
	}
	if tag.String() != "COMMIT" {
		return errCommitRolledBack
	}
	return nil
}
