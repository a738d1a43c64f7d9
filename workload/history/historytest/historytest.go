package historytest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/outbox"
)

// Run runs the conformance suite against the stores newStore returns.
// newStore is called once per subtest and must return a fresh, empty store
// that nothing else uses; it registers its own cleanup (closing the store)
// with t.Cleanup. Subtests run in parallel.
func Run(t *testing.T, newStore func(t *testing.T) history.Store) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s history.Store)
	}{
		{"CreateDirect", testCreateDirect},
		{"CreateDirectConcurrent", testCreateDirectConcurrent},
		{"CreateGroup", testCreateGroup},
		{"InvalidUsers", testInvalidUsers},
		{"TextRules", testTextRules},
		{"AddMember", testAddMember},
		{"ChatNotFound", testChatNotFound},
		{"ChatsOf", testChatsOf},
		{"Commit", testCommit},
		{"CommitMembersAtCommitTime", testCommitMembersAtCommitTime},
		{"CommitDuplicateAcrossBatches", testCommitDuplicateAcrossBatches},
		{"CommitDuplicateWithinBatch", testCommitDuplicateWithinBatch},
		{"CommitResendAfterLeaving", testCommitResendAfterLeaving},
		{"CommitKeyReusedForOtherContent", testCommitKeyReusedForOtherContent},
		{"CommitPerDraftErrors", testCommitPerDraftErrors},
		{"CommitFailedDraftKeepsKeyFree", testCommitFailedDraftKeepsKeyFree},
		{"CommitEmpty", testCommitEmpty},
		{"CommitConcurrent", testCommitConcurrent},
		{"PageManyPages", testPageManyPages},
		{"PageHasMoreBoundary", testPageHasMoreBoundary},
		{"PageSince", testPageSince},
		{"PageErrors", testPageErrors},
		{"SentAtRoundTrip", testSentAtRoundTrip},
		{"PurgeHistory", testPurgeHistory},
		{"SaveReads", testSaveReads},
		{"MessageSeq", testMessageSeq},
		{"RemoveMember", testRemoveMember},
		{"ReadState", testReadState},
		{"SaveReadsKeepsLatest", testSaveReadsKeepsLatest},
		{"Ping", testPing},
		{"Edit", testEdit},
		{"EditRules", testEditRules},
		{"Delete", testDelete},
		{"DeleteRules", testDeleteRules},
		{"DeleteByAdmins", testDeleteByAdmins},
		{"ChatAPIEditsDeletes", testChatAPIEditsDeletes},
		{"MemberHistoryEdits", testMemberHistoryEdits},
		{"EditDeleteOneBatch", testEditDeleteOneBatch},
		{"UnreadOrdinaryOnly", testUnreadOrdinaryOnly},
		{"CoMembers", testCoMembers},
		{"FleetRecord", testFleetRecord},
		{"ProbeWrite", testProbeWrite},
	}
	tests = append(tests, chatAPITests...) // chatapi.go
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

// ctxFor returns a context that ends with the test or after a minute.
func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Draft returns a valid draft: a fresh ULID id and SentAt now.
func Draft(chatID, sender, correlationID, body string) history.Draft {
	return history.Draft{
		ID:            ulid.Make().String(),
		ChatID:        chatID,
		SenderID:      sender,
		SenderDevice:  "dev-" + sender,
		CorrelationID: correlationID,
		Body:          body,
		SentAt:        time.Now(),
	}
}

// MustCommit commits drafts and fails the test on a batch error or on any
// per-draft error.
func MustCommit(t testing.TB, s history.Store, drafts ...history.Draft) []history.Result {
	t.Helper()
	res := commit(t, s, drafts...)
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("Commit: draft %d: %v", i, r.Err)
		}
	}
	return res
}

// commit commits drafts, failing the test on a batch error or a result
// count that does not match.
func commit(t testing.TB, s history.Store, drafts ...history.Draft) []history.Result {
	t.Helper()
	res, err := s.Commit(ctxFor(t), drafts)
	if err != nil {
		t.Fatalf("Commit(%d drafts): %v", len(drafts), err)
	}
	if len(res) != len(drafts) {
		t.Fatalf("Commit(%d drafts) returned %d results", len(drafts), len(res))
	}
	return res
}

// PageAll pages chatID from since with limit until hasMore is false and
// returns every message. It fails the test when a page is longer than
// limit, when a page that claims more follow is short, or when paging does
// not end.
func PageAll(t testing.TB, s history.Store, chatID, since string, limit int) []history.Message {
	t.Helper()
	var all []history.Message
	for pages := 0; ; pages++ {
		if pages > 1_000_000 {
			t.Fatalf("paging %s does not end", chatID)
		}
		msgs, more, err := s.Page(ctxFor(t), chatID, since, limit)
		if err != nil {
			t.Fatalf("Page(%s, %q, %d): %v", chatID, since, limit, err)
		}
		if len(msgs) > limit {
			t.Fatalf("Page(limit %d) returned %d messages", limit, len(msgs))
		}
		all = append(all, msgs...)
		if !more {
			return all
		}
		if len(msgs) != limit {
			t.Fatalf("Page(limit %d) returned %d messages and hasMore", limit, len(msgs))
		}
		since = msgs[len(msgs)-1].ID
	}
}

func mustGroup(t testing.TB, s history.Store, creator, title string, members ...string) history.Chat {
	t.Helper()
	c, err := s.CreateGroup(ctxFor(t), creator, title, members)
	if err != nil {
		t.Fatalf("CreateGroup(%s, %q, %v): %v", creator, title, members, err)
	}
	return c
}

func mustDirect(t testing.TB, s history.Store, a, b string) history.Chat {
	t.Helper()
	c, _, err := s.CreateDirect(ctxFor(t), a, b)
	if err != nil {
		t.Fatalf("CreateDirect(%s, %s): %v", a, b, err)
	}
	return c
}

func wantErr(t testing.TB, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: err = %v, want %v", what, err, want)
	}
}

func sameChat(t testing.TB, what string, got, want history.Chat) {
	t.Helper()
	if got.ID != want.ID || got.Kind != want.Kind || got.Title != want.Title ||
		!slices.Equal(got.Members, want.Members) || !got.CreatedAt.Equal(want.CreatedAt) {
		t.Errorf("%s: chat = %+v, want %+v", what, got, want)
	}
}

// sameMessage compares every field, SentAt by instant and as UTC.
func sameMessage(t testing.TB, what string, got, want history.Message) {
	t.Helper()
	if got.Seq != want.Seq || got.ID != want.ID || got.ChatID != want.ChatID || got.SenderID != want.SenderID ||
		got.SenderDevice != want.SenderDevice || got.CorrelationID != want.CorrelationID || got.Body != want.Body ||
		!got.SentAt.Equal(want.SentAt) {
		t.Errorf("%s: message = %+v, want %+v", what, got, want)
	}
	if got.SentAt.Location() != time.UTC {
		t.Errorf("%s: SentAt location = %v, want UTC", what, got.SentAt.Location())
	}
}

func ids(msgs []history.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

func testCreateDirect(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	c, created, err := s.CreateDirect(ctx, "bob", "alice")
	if err != nil {
		t.Fatalf("CreateDirect: %v", err)
	}
	if !created {
		t.Error("first CreateDirect: created = false")
	}
	if c.ID == "" || c.Kind != history.KindDirect || c.Title != "" || !slices.Equal(c.Members, []string{"alice", "bob"}) {
		t.Errorf("CreateDirect = %+v, want a direct chat of [alice bob] with no title", c)
	}
	if c.CreatedAt.IsZero() {
		t.Error("CreatedAt is zero")
	}
	for _, pair := range [][2]string{{"alice", "bob"}, {"bob", "alice"}} {
		again, created, err := s.CreateDirect(ctx, pair[0], pair[1])
		if err != nil {
			t.Fatalf("CreateDirect%v again: %v", pair, err)
		}
		if created {
			t.Errorf("CreateDirect%v again: created = true", pair)
		}
		sameChat(t, fmt.Sprintf("CreateDirect%v again", pair), again, c)
	}
	got, err := s.Chat(ctx, c.ID)
	if err != nil {
		t.Fatalf("Chat: %v", err)
	}
	sameChat(t, "Chat", got, c)
	if _, _, err := s.CreateDirect(ctx, "alice", "alice"); !errors.Is(err, history.ErrInvalid) {
		t.Errorf("CreateDirect(alice, alice): err = %v, want ErrInvalid", err)
	}
	other := mustDirect(t, s, "alice", "carol")
	if other.ID == c.ID {
		t.Error("direct chats of different pairs share an id")
	}
}

func testCreateDirectConcurrent(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	const n = 16
	chats := make([]history.Chat, n)
	created := make([]bool, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			a, b := "alice", "bob"
			if i%2 == 1 {
				a, b = b, a
			}
			chats[i], created[i], errs[i] = s.CreateDirect(ctx, a, b)
		})
	}
	close(start)
	wg.Wait()
	creations := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("CreateDirect #%d: %v", i, errs[i])
		}
		if created[i] {
			creations++
		}
		if chats[i].ID != chats[0].ID {
			t.Errorf("CreateDirect #%d: chat %s, #0 got %s", i, chats[i].ID, chats[0].ID)
		}
	}
	if creations != 1 {
		t.Errorf("%d calls reported created, want exactly 1", creations)
	}
	list, err := s.ChatsOf(ctx, "alice")
	if err != nil {
		t.Fatalf("ChatsOf: %v", err)
	}
	if len(list) != 1 {
		t.Errorf("alice has %d chats after concurrent CreateDirect, want 1", len(list))
	}
}

func testCreateGroup(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	c, err := s.CreateGroup(ctx, "carol", "  Team  ", []string{"bob", "alice", "bob", "carol"})
	if err != nil {
		t.Fatalf("CreateGroup: %v", err)
	}
	if c.ID == "" || c.Kind != history.KindGroup || c.Title != "Team" ||
		!slices.Equal(c.Members, []string{"alice", "bob", "carol"}) || c.CreatedAt.IsZero() {
		t.Errorf("CreateGroup = %+v, want group \"Team\" of [alice bob carol]", c)
	}
	got, err := s.Chat(ctx, c.ID)
	if err != nil {
		t.Fatalf("Chat: %v", err)
	}
	sameChat(t, "Chat", got, c)

	solo, err := s.CreateGroup(ctx, "dave", "", nil)
	if err != nil {
		t.Fatalf("CreateGroup alone: %v", err)
	}
	if !slices.Equal(solo.Members, []string{"dave"}) || solo.Title != "" {
		t.Errorf("CreateGroup alone = %+v, want [dave] without title", solo)
	}
	if solo.ID == c.ID {
		t.Error("two groups share an id")
	}
}

func testInvalidUsers(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	long := string(slices.Repeat([]byte("x"), 129))
	for _, bad := range []string{"", long, "bad\xff"} {
		if _, _, err := s.CreateDirect(ctx, "alice", bad); !errors.Is(err, history.ErrInvalid) {
			t.Errorf("CreateDirect(alice, %q): err = %v, want ErrInvalid", bad, err)
		}
		if _, _, err := s.CreateDirect(ctx, bad, "alice"); !errors.Is(err, history.ErrInvalid) {
			t.Errorf("CreateDirect(%q, alice): err = %v, want ErrInvalid", bad, err)
		}
		if _, err := s.CreateGroup(ctx, bad, "t", []string{"alice"}); !errors.Is(err, history.ErrInvalid) {
			t.Errorf("CreateGroup(creator %q): err = %v, want ErrInvalid", bad, err)
		}
		if _, err := s.CreateGroup(ctx, "alice", "t", []string{"bob", bad}); !errors.Is(err, history.ErrInvalid) {
			t.Errorf("CreateGroup(member %q): err = %v, want ErrInvalid", bad, err)
		}
	}
	// 128 bytes is allowed.
	if _, err := s.CreateGroup(ctx, "alice", "t", []string{long[:128]}); err != nil {
		t.Errorf("CreateGroup with a 128-byte member id: %v", err)
	}
	// Nothing was created by the refused calls.
	list, err := s.ChatsOf(ctx, "alice")
	if err != nil {
		t.Fatalf("ChatsOf: %v", err)
	}
	if len(list) != 1 {
		t.Errorf("alice has %d chats, want 1 (refused calls must create nothing)", len(list))
	}
}

func testAddMember(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	g := mustGroup(t, s, "alice", "g", "bob")
	c, err := s.AddMember(ctx, g.ID, "bob", "carol")
	if err != nil {
		t.Fatalf("AddMember: %v", err)
	}
	if !slices.Equal(c.Members, []string{"alice", "bob", "carol"}) || c.ID != g.ID || c.Kind != history.KindGroup {
		t.Errorf("AddMember = %+v, want members [alice bob carol]", c)
	}
	again, err := s.AddMember(ctx, g.ID, "alice", "carol")
	if err != nil {
		t.Fatalf("AddMember existing: %v", err)
	}
	if !slices.Equal(again.Members, c.Members) {
		t.Errorf("AddMember existing: members %v, want %v", again.Members, c.Members)
	}
	got, err := s.Chat(ctx, g.ID)
	if err != nil {
		t.Fatalf("Chat: %v", err)
	}
	if !slices.Equal(got.Members, []string{"alice", "bob", "carol"}) {
		t.Errorf("Chat after AddMember: members %v", got.Members)
	}

	_, err = s.AddMember(ctx, g.ID, "mallory", "erin")
	wantErr(t, "AddMember by a non-member", err, history.ErrNotMember)
	d := mustDirect(t, s, "alice", "bob")
	_, err = s.AddMember(ctx, d.ID, "alice", "carol")
	wantErr(t, "AddMember to a direct chat", err, history.ErrInvalid)
	_, err = s.AddMember(ctx, "no-such-chat", "alice", "carol")
	wantErr(t, "AddMember to an unknown chat", err, history.ErrNotFound)
	_, err = s.AddMember(ctx, g.ID, "alice", "")
	wantErr(t, "AddMember of an empty user id", err, history.ErrInvalid)

	got, err = s.Chat(ctx, g.ID)
	if err != nil {
		t.Fatalf("Chat: %v", err)
	}
	if !slices.Equal(got.Members, []string{"alice", "bob", "carol"}) {
		t.Errorf("refused AddMember calls changed the group: members %v", got.Members)
	}
	got, err = s.Chat(ctx, d.ID)
	if err != nil {
		t.Fatalf("Chat: %v", err)
	}
	if !slices.Equal(got.Members, []string{"alice", "bob"}) {
		t.Errorf("refused AddMember changed the direct chat: members %v", got.Members)
	}
	list, err := s.ChatsOf(ctx, "carol")
	if err != nil {
		t.Fatalf("ChatsOf: %v", err)
	}
	if len(list) != 1 || list[0].ID != g.ID {
		t.Errorf("ChatsOf(carol) = %+v, want the group only", list)
	}
}

func testChatNotFound(t *testing.T, s history.Store) {
	_, err := s.Chat(ctxFor(t), "no-such-chat")
	wantErr(t, "Chat(unknown)", err, history.ErrNotFound)
}

func testChatsOf(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	g1 := mustGroup(t, s, "alice", "first", "carol")
	d := mustDirect(t, s, "bob", "alice")
	g2 := mustGroup(t, s, "carol", "second", "alice", "dave")
	g3 := mustGroup(t, s, "bob", "bob only")

	check := func(user string, want ...history.Chat) {
		t.Helper()
		got, err := s.ChatsOf(ctx, user)
		if err != nil {
			t.Fatalf("ChatsOf(%s): %v", user, err)
		}
		if len(got) != len(want) {
			t.Fatalf("ChatsOf(%s) = %d chats %+v, want %d", user, len(got), got, len(want))
		}
		for i := range want {
			sameChat(t, fmt.Sprintf("ChatsOf(%s)[%d]", user, i), got[i], want[i])
		}
	}
	check("alice", g1, d, g2)
	check("bob", d, g3)
	check("carol", g1, g2)
	check("dave", g2)
	check("nobody")
}

// heads reads the head of every partition of log.
func heads(t testing.TB, log outbox.Log) map[int32]int64 {
	t.Helper()
	ctx := ctxFor(t)
	parts, err := log.Partitions(ctx)
	if err != nil {
		t.Fatalf("Partitions: %v", err)
	}
	hs := map[int32]int64{}
	for _, p := range parts {
		h, err := log.Head(ctx, p)
		if err != nil {
			t.Fatalf("Head(%d): %v", p, err)
		}
		hs[p] = h
	}
	return hs
}

// scanSince returns every row of log above the given heads, in partition
// then position order.
func scanSince(t testing.TB, log outbox.Log, from map[int32]int64) []outbox.Row {
	t.Helper()
	ctx := ctxFor(t)
	var all []outbox.Row
	for _, p := range slices.Sorted(maps.Keys(from)) {
		after := from[p]
		for {
			rows, err := log.Scan(ctx, p, after, 100)
			if err != nil {
				t.Fatalf("Scan(%d, %d): %v", p, after, err)
			}
			if len(rows) == 0 {
				break
			}
			all = append(all, rows...)
			after = rows[len(rows)-1].Pos
		}
	}
	return all
}

// checkDeliveries checks the deliveries of the committed (not duplicate)
// results: either every result has one per member, in recipient order, or
// none has any (a store without an outbox). When s is also an outbox.Log,
// the rows above before must be exactly those deliveries, each carrying its
// history message.
func checkDeliveries(t testing.TB, s history.Store, before map[int32]int64, results []history.Result) {
	t.Helper()
	type key struct {
		part      int32
		pos       int64
		recipient string
	}
	want := map[key]history.Message{}
	withRows, without := 0, 0
	for i, r := range results {
		if r.Err != nil || r.Duplicate {
			if r.Err == nil && len(r.Deliveries) != 0 {
				t.Errorf("result %d: duplicate with %d deliveries, want none", i, len(r.Deliveries))
			}
			continue
		}
		if len(r.Deliveries) == 0 {
			without++
			continue
		}
		withRows++
		if len(r.Deliveries) != len(r.Members) {
			t.Errorf("result %d: %d deliveries for %d members", i, len(r.Deliveries), len(r.Members))
			continue
		}
		for j, d := range r.Deliveries {
			if d.Recipient != r.Members[j] {
				t.Errorf("result %d: delivery %d to %q, want %q (recipient order)", i, j, d.Recipient, r.Members[j])
			}
			want[key{d.Partition, d.Pos, d.Recipient}] = r.Message
		}
	}
	if withRows > 0 && without > 0 {
		t.Errorf("%d committed results have deliveries and %d have none", withRows, without)
	}
	log, ok := s.(outbox.Log)
	if !ok {
		return
	}
	rows := scanSince(t, log, before)
	if len(rows) != len(want) {
		t.Errorf("outbox holds %d new rows, deliveries name %d", len(rows), len(want))
	}
	for _, row := range rows {
		k := key{row.Partition, row.Pos, row.Recipient}
		m, ok := want[k]
		if !ok {
			t.Errorf("outbox row %+v is not among the deliveries", k)
			continue
		}
		if p := log.PartitionOf(row.Recipient); p != row.Partition {
			t.Errorf("outbox row %+v: PartitionOf(%s) = %d", k, row.Recipient, p)
		}
		if row.Message.ID != m.ID || row.Message.ChatID != m.ChatID || row.Message.Body != m.Body ||
			row.Message.SenderID != m.SenderID || !row.Message.SentAt.Equal(m.SentAt) {
			t.Errorf("outbox row %+v carries %+v, want history message %+v", k, row.Message, m)
		}
	}
}

// maybeHeads is heads(log) when s is an outbox.Log, else nil.
func maybeHeads(t testing.TB, s history.Store) map[int32]int64 {
	if log, ok := s.(outbox.Log); ok {
		return heads(t, log)
	}
	return nil
}

func testCommit(t *testing.T, s history.Store) {
	g := mustGroup(t, s, "alice", "g", "carol", "bob")
	before := maybeHeads(t, s)
	drafts := []history.Draft{
		Draft(g.ID, "alice", "a-1", "hello"),
		Draft(g.ID, "bob", "b-1", "hi"),
		Draft(g.ID, "alice", "a-2", "how are you"),
	}
	res := MustCommit(t, s, drafts...)
	for i, r := range res {
		if r.Duplicate {
			t.Errorf("result %d: Duplicate on first commit", i)
		}
		if !slices.Equal(r.Members, []string{"alice", "bob", "carol"}) {
			t.Errorf("result %d: Members = %v", i, r.Members)
		}
		d := drafts[i]
		want := history.Message{Seq: r.Message.Seq, ID: d.ID, ChatID: d.ChatID, SenderID: d.SenderID,
			SenderDevice: d.SenderDevice, CorrelationID: d.CorrelationID, Body: d.Body, SentAt: d.SentAt}
		sameMessage(t, fmt.Sprintf("result %d", i), r.Message, want)
		if i > 0 && r.Message.Seq <= res[i-1].Message.Seq {
			t.Errorf("result %d: Seq %d not above the previous %d", i, r.Message.Seq, res[i-1].Message.Seq)
		}
	}
	checkDeliveries(t, s, before, res)

	more := MustCommit(t, s, Draft(g.ID, "carol", "c-1", "later"))
	if more[0].Message.Seq <= res[2].Message.Seq {
		t.Errorf("a later commit got Seq %d, not above %d", more[0].Message.Seq, res[2].Message.Seq)
	}
	for i, d := range more[0].Deliveries {
		for _, old := range res[2].Deliveries {
			if d.Partition == old.Partition && d.Pos <= old.Pos {
				t.Errorf("later delivery %d at %d/%d, not above earlier %d", i, d.Partition, d.Pos, old.Pos)
			}
		}
	}

	got := PageAll(t, s, g.ID, "", 100)
	if len(got) != 4 {
		t.Fatalf("Page returned %d messages, want 4", len(got))
	}
	for i, r := range append(res, more...) {
		sameMessage(t, fmt.Sprintf("Page[%d]", i), got[i], r.Message)
	}
}

func testCommitMembersAtCommitTime(t *testing.T, s history.Store) {
	g := mustGroup(t, s, "alice", "g", "bob")
	first := MustCommit(t, s, Draft(g.ID, "alice", "a-1", "before"))
	if !slices.Equal(first[0].Members, []string{"alice", "bob"}) {
		t.Errorf("Members = %v, want [alice bob]", first[0].Members)
	}
	if _, err := s.AddMember(ctxFor(t), g.ID, "bob", "aaron"); err != nil {
		t.Fatalf("AddMember: %v", err)
	}
	before := maybeHeads(t, s)
	res := MustCommit(t, s, Draft(g.ID, "aaron", "x-1", "after"))
	if !slices.Equal(res[0].Members, []string{"aaron", "alice", "bob"}) {
		t.Errorf("Members = %v, want [aaron alice bob]", res[0].Members)
	}
	checkDeliveries(t, s, before, res)
}

func testCommitDuplicateAcrossBatches(t *testing.T, s history.Store) {
	d := mustDirect(t, s, "alice", "bob")
	first := MustCommit(t, s, Draft(d.ID, "alice", "k-1", "original"))[0]
	before := maybeHeads(t, s)
	// A resend: the same key, chat and body, under a new message id and
	// time (the ingest stage mints both again).
	resend := Draft(d.ID, "alice", "k-1", "original")
	resend.SentAt = resend.SentAt.Add(time.Hour)
	r := MustCommit(t, s, resend)[0]
	if !r.Duplicate {
		t.Error("resend: Duplicate = false")
	}
	sameMessage(t, "resend", r.Message, first.Message)
	if len(r.Deliveries) != 0 {
		t.Errorf("resend: %d deliveries, want none", len(r.Deliveries))
	}
	checkDeliveries(t, s, before, []history.Result{r})
	// The very same draft again (an ingest retry) is a duplicate too.
	same := Draft(d.ID, "alice", "k-1", "original")
	same.ID = first.Message.ID
	if r := MustCommit(t, s, same)[0]; !r.Duplicate || r.Message.ID != first.Message.ID {
		t.Errorf("identical resend = %+v, want the original as a duplicate", r)
	}

	// The key is per sender: bob may use the same correlation id.
	other := MustCommit(t, s, Draft(d.ID, "bob", "k-1", "bob's"))[0]
	if other.Duplicate || other.Message.ID == first.Message.ID {
		t.Errorf("another sender's k-1 was taken for a duplicate: %+v", other)
	}
	got := PageAll(t, s, d.ID, "", 10)
	if want := []string{first.Message.ID, other.Message.ID}; !slices.Equal(ids(got), want) {
		t.Errorf("history = %v, want %v", ids(got), want)
	}
}

// testCommitResendAfterLeaving: the idempotency key is checked before the
// membership rule, so a resend from a sender who has left the group since
// answers the original (in a batch of its own, and beside new messages of
// members), where a new message from it is refused with ErrNotMember.
func testCommitResendAfterLeaving(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	g := mustGroup(t, s, "alice", "g", "bob")
	first := MustCommit(t, s, Draft(g.ID, "bob", "k-1", "before leaving"))[0]
	if _, _, err := s.RemoveMember(ctx, g.ID, "bob", "bob"); err != nil {
		t.Fatal(err)
	}
	r := MustCommit(t, s, Draft(g.ID, "bob", "k-1", "before leaving"))[0]
	if r.Err != nil || !r.Duplicate || r.Message.ID != first.Message.ID {
		t.Errorf("resend after leaving = %+v, want the original as a duplicate", r)
	}
	res, err := s.Commit(ctx, []history.Draft{Draft(g.ID, "alice", "a-1", "new"), Draft(g.ID, "bob", "k-1", "before leaving"), Draft(g.ID, "bob", "k-2", "after leaving")})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || res[0].Duplicate {
		t.Errorf("a member's new message = %+v, want it stored", res[0])
	}
	if !res[1].Duplicate || res[1].Message.ID != first.Message.ID {
		t.Errorf("resend after leaving, in a batch = %+v, want the original as a duplicate", res[1])
	}
	if !errors.Is(res[2].Err, history.ErrNotMember) {
		t.Errorf("a new message after leaving: err %v, want ErrNotMember", res[2].Err)
	}
}

func testCommitDuplicateWithinBatch(t *testing.T, s history.Store) {
	d := mustDirect(t, s, "alice", "bob")
	before := maybeHeads(t, s)
	a := Draft(d.ID, "alice", "k-1", "first")
	b := Draft(d.ID, "alice", "k-1", "first")
	c := Draft(d.ID, "alice", "k-2", "third")
	res := MustCommit(t, s, a, b, c)
	if res[0].Duplicate || res[2].Duplicate {
		t.Errorf("Duplicate flags = %v %v %v, want false true false", res[0].Duplicate, res[1].Duplicate, res[2].Duplicate)
	}
	if !res[1].Duplicate {
		t.Fatal("second draft with the same key: Duplicate = false")
	}
	sameMessage(t, "duplicate in batch", res[1].Message, res[0].Message)
	if res[1].Message.ID != a.ID {
		t.Errorf("duplicate carries id %s, want the original %s", res[1].Message.ID, a.ID)
	}
	checkDeliveries(t, s, before, res)
	got := PageAll(t, s, d.ID, "", 10)
	if want := []string{a.ID, c.ID}; !slices.Equal(ids(got), want) {
		t.Errorf("history = %v, want %v", ids(got), want)
	}
}

// testCommitKeyReusedForOtherContent: a correlationId is an idempotency
// key for one message. The same (sender, correlationId) with another chat
// or another body than the original is refused with ErrInvalid and stores
// nothing (PROTOCOL.md §3), whether the original committed earlier or
// earlier in the same batch; before, it was answered with the original as
// a duplicate and the new recipient got nothing (issue 13, point 3).
func testCommitKeyReusedForOtherContent(t *testing.T, s history.Store) {
	d := mustDirect(t, s, "alice", "bob")
	g := mustGroup(t, s, "alice", "g", "carol")
	first := MustCommit(t, s, Draft(d.ID, "alice", "k-1", "original"))[0]
	before := maybeHeads(t, s)
	otherBody := Draft(d.ID, "alice", "k-1", "another body")
	otherChat := Draft(g.ID, "alice", "k-1", "original")
	unknownChat := Draft("no-such-chat", "alice", "k-1", "original")
	// Within one batch: the first of a key decides, a later one with
	// other content is refused.
	a := Draft(d.ID, "alice", "k-2", "two")
	b := Draft(d.ID, "alice", "k-2", "two, edited")
	c := Draft(g.ID, "alice", "k-2", "two")
	same := Draft(d.ID, "alice", "k-2", "two")
	res := commit(t, s, otherBody, otherChat, unknownChat, a, b, c, same)
	for i, what := range []string{"another body", "another chat", "an unknown chat", "", "another body in the batch", "another chat in the batch"} {
		if what == "" {
			continue
		}
		wantErr(t, "key reused for "+what, res[i].Err, history.ErrInvalid)
		if res[i].Duplicate || len(res[i].Deliveries) != 0 {
			t.Errorf("key reused for %s: Duplicate %v, %d deliveries; want neither", what, res[i].Duplicate, len(res[i].Deliveries))
		}
	}
	if res[3].Err != nil || res[3].Duplicate {
		t.Fatalf("k-2 first use: %+v", res[3])
	}
	if r := res[6]; r.Err != nil || !r.Duplicate || r.Message.ID != a.ID {
		t.Errorf("k-2 with the same chat and body = %+v, want a duplicate of %s", r, a.ID)
	}
	checkDeliveries(t, s, before, res)
	if got := ids(PageAll(t, s, d.ID, "", 10)); !slices.Equal(got, []string{first.Message.ID, a.ID}) {
		t.Errorf("direct history = %v, want [k-1 k-2]", got)
	}
	if got := PageAll(t, s, g.ID, "", 10); len(got) != 0 {
		t.Errorf("group history = %v, want none: nothing is stored for a reused key", ids(got))
	}
	// The original still answers a faithful resend.
	if r := MustCommit(t, s, Draft(d.ID, "alice", "k-1", "original"))[0]; !r.Duplicate || r.Message.ID != first.Message.ID {
		t.Errorf("faithful resend of k-1 = %+v, want the original", r)
	}
}

func testCommitPerDraftErrors(t *testing.T, s history.Store) {
	d := mustDirect(t, s, "alice", "bob")
	g := mustGroup(t, s, "carol", "g", "dave")
	before := maybeHeads(t, s)
	ok1 := Draft(d.ID, "alice", "k-1", "one")
	unknown := Draft("no-such-chat", "alice", "k-2", "lost")
	stranger := Draft(d.ID, "mallory", "k-3", "intruder")
	noKey := Draft(d.ID, "alice", "", "no correlation id")
	ok2 := Draft(g.ID, "dave", "k-4", "two")
	reused := Draft(d.ID, "bob", "k-5", "same message id as ok1")
	reused.ID = ok1.ID
	ok3 := Draft(d.ID, "bob", "k-6", "three")
	res := commit(t, s, ok1, unknown, stranger, noKey, ok2, reused, ok3)

	for _, i := range []int{0, 4, 6} {
		if res[i].Err != nil {
			t.Errorf("result %d: %v", i, res[i].Err)
		}
	}
	wantErr(t, "unknown chat", res[1].Err, history.ErrNotFound)
	wantErr(t, "sender not a member", res[2].Err, history.ErrNotMember)
	wantErr(t, "empty correlation id", res[3].Err, history.ErrInvalid)
	wantErr(t, "message id already used", res[5].Err, history.ErrInvalid)
	for _, i := range []int{1, 2, 3, 5} {
		if len(res[i].Deliveries) != 0 || res[i].Duplicate {
			t.Errorf("failed result %d has deliveries %v or Duplicate", i, res[i].Deliveries)
		}
	}
	checkDeliveries(t, s, before, res)
	if got := ids(PageAll(t, s, d.ID, "", 10)); !slices.Equal(got, []string{ok1.ID, ok3.ID}) {
		t.Errorf("direct history = %v, want [ok1 ok3]", got)
	}
	if got := ids(PageAll(t, s, g.ID, "", 10)); !slices.Equal(got, []string{ok2.ID}) {
		t.Errorf("group history = %v, want [ok2]", got)
	}
}

func testCommitFailedDraftKeepsKeyFree(t *testing.T, s history.Store) {
	g := mustGroup(t, s, "alice", "g")
	res := commit(t, s, Draft(g.ID, "bob", "k-1", "too early"))
	wantErr(t, "non-member send", res[0].Err, history.ErrNotMember)
	if _, err := s.AddMember(ctxFor(t), g.ID, "alice", "bob"); err != nil {
		t.Fatalf("AddMember: %v", err)
	}
	r := MustCommit(t, s, Draft(g.ID, "bob", "k-1", "now a member"))[0]
	if r.Duplicate {
		t.Error("a refused draft reserved its idempotency key")
	}
	if got := PageAll(t, s, g.ID, "", 10); len(got) != 1 || got[0].Body != "now a member" {
		t.Errorf("history = %+v, want the one accepted message", got)
	}
}

func testCommitEmpty(t *testing.T, s history.Store) {
	res, err := s.Commit(ctxFor(t), nil)
	if err != nil || len(res) != 0 {
		t.Errorf("Commit(nil) = %v, %v; want no results, no error", res, err)
	}
}

func testCommitConcurrent(t *testing.T, s history.Store) {
	g := mustGroup(t, s, "u0", "g", "u1", "u2", "u3")
	before := maybeHeads(t, s)
	const writers, batches, perBatch = 4, 10, 5
	var mu sync.Mutex
	var all []history.Result
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for b := range batches {
				drafts := make([]history.Draft, perBatch)
				for i := range drafts {
					drafts[i] = Draft(g.ID, fmt.Sprintf("u%d", w), fmt.Sprintf("%d-%d", b, i), "x")
				}
				res, err := s.Commit(ctxFor(t), drafts)
				if err != nil {
					t.Errorf("Commit: %v", err)
					return
				}
				mu.Lock()
				all = append(all, res...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	checkDeliveries(t, s, before, all)
	got := PageAll(t, s, g.ID, "", 13)
	if len(got) != writers*batches*perBatch {
		t.Fatalf("history holds %d messages, want %d", len(got), writers*batches*perBatch)
	}
	seen := map[string]bool{}
	for i, m := range got {
		if i > 0 && m.Seq <= got[i-1].Seq {
			t.Errorf("Page order: Seq %d after %d", m.Seq, got[i-1].Seq)
		}
		seen[m.ID] = true
	}
	for _, r := range all {
		if r.Err != nil || !seen[r.Message.ID] {
			t.Errorf("result %+v missing from history", r)
		}
	}
}

func testPageManyPages(t *testing.T, s history.Store) {
	a := mustGroup(t, s, "alice", "a", "bob")
	b := mustGroup(t, s, "bob", "b", "alice")
	const total, batch = 1000, 36
	var want []string
	for n := 0; n < total; {
		var drafts []history.Draft
		for i := 0; i < batch && n < total; i++ {
			drafts = append(drafts, Draft(a.ID, "alice", fmt.Sprintf("a-%d", n), fmt.Sprint(n)))
			// Interleave messages of another chat: they must not show up.
			drafts = append(drafts, Draft(b.ID, "bob", fmt.Sprintf("b-%d", n), "other chat"))
			n++
		}
		for i, r := range MustCommit(t, s, drafts...) {
			if i%2 == 0 {
				want = append(want, r.Message.ID)
			}
		}
	}
	got := PageAll(t, s, a.ID, "", 7)
	if !slices.Equal(ids(got), want) {
		t.Fatalf("paging by 7 returned %d messages; want all %d in commit order, none skipped or repeated", len(got), len(want))
	}
	for i, m := range got {
		if m.ChatID != a.ID {
			t.Fatalf("message %d from chat %s", i, m.ChatID)
		}
		if i > 0 && m.Seq <= got[i-1].Seq {
			t.Fatalf("message %d: Seq %d not above %d", i, m.Seq, got[i-1].Seq)
		}
	}
	// Paging from the middle returns exactly the rest.
	rest := PageAll(t, s, a.ID, want[499], 500)
	if !slices.Equal(ids(rest), want[500:]) {
		t.Errorf("paging from message 499 returned %d messages, want the 500 after it", len(rest))
	}
}

func testPageHasMoreBoundary(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	g := mustGroup(t, s, "alice", "g")
	var drafts []history.Draft
	for i := range 14 {
		drafts = append(drafts, Draft(g.ID, "alice", fmt.Sprint(i), "x"))
	}
	res := MustCommit(t, s, drafts...)
	msgs, more, err := s.Page(ctx, g.ID, "", 7)
	if err != nil || len(msgs) != 7 || !more {
		t.Fatalf("first page: %d messages, hasMore %v, err %v; want 7, true", len(msgs), more, err)
	}
	msgs, more, err = s.Page(ctx, g.ID, msgs[6].ID, 7)
	if err != nil || len(msgs) != 7 || more {
		t.Fatalf("second page: %d messages, hasMore %v, err %v; want 7, false", len(msgs), more, err)
	}
	if msgs[6].ID != res[13].Message.ID {
		t.Errorf("second page ends at %s, want the last message %s", msgs[6].ID, res[13].Message.ID)
	}
	msgs, more, err = s.Page(ctx, g.ID, res[13].Message.ID, 7)
	if err != nil || len(msgs) != 0 || more {
		t.Errorf("page after the last message: %d messages, hasMore %v, err %v; want none", len(msgs), more, err)
	}
	msgs, more, err = s.Page(ctx, g.ID, "", 14)
	if err != nil || len(msgs) != 14 || more {
		t.Errorf("page of exactly all: %d messages, hasMore %v, err %v; want 14, false", len(msgs), more, err)
	}
	msgs, more, err = s.Page(ctx, g.ID, "", 1)
	if err != nil || len(msgs) != 1 || !more || msgs[0].ID != res[0].Message.ID {
		t.Errorf("page of one: %d messages, hasMore %v, err %v; want the first, true", len(msgs), more, err)
	}
	empty := mustGroup(t, s, "bob", "empty")
	msgs, more, err = s.Page(ctx, empty.ID, "", 10)
	if err != nil || len(msgs) != 0 || more {
		t.Errorf("page of an empty chat: %d messages, hasMore %v, err %v", len(msgs), more, err)
	}
}

func testPageSince(t *testing.T, s history.Store) {
	a := mustDirect(t, s, "alice", "bob")
	b := mustDirect(t, s, "alice", "carol")
	var drafts []history.Draft
	for i := range 5 {
		drafts = append(drafts, Draft(a.ID, "alice", fmt.Sprint("a", i), "x"))
	}
	res := MustCommit(t, s, drafts...)
	foreign := MustCommit(t, s, Draft(b.ID, "carol", "c0", "y"))[0]
	all := make([]string, len(res))
	for i, r := range res {
		all[i] = r.Message.ID
	}
	for _, tc := range []struct {
		name, since string
		want        []string
	}{
		{"empty since", "", all},
		{"unknown since", ulid.Make().String(), all},
		{"garbage since", "not-an-id", all},
		{"since from another chat", foreign.Message.ID, all},
		{"since the first", all[0], all[1:]},
		{"since the third", all[2], all[3:]},
		{"since the last", all[4], nil},
	} {
		got := PageAll(t, s, a.ID, tc.since, 100)
		if !slices.Equal(ids(got), tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, ids(got), tc.want)
		}
	}
}

func testPageErrors(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	_, _, err := s.Page(ctx, "no-such-chat", "", 10)
	wantErr(t, "Page(unknown chat)", err, history.ErrNotFound)
	g := mustGroup(t, s, "alice", "g")
	_, _, err = s.Page(ctx, g.ID, "", 0)
	wantErr(t, "Page(limit 0)", err, history.ErrInvalid)
}

func testSentAtRoundTrip(t *testing.T, s history.Store) {
	g := mustGroup(t, s, "alice", "g")
	zone := time.FixedZone("UTC+5:30", 5*3600+1800)
	times := []time.Time{
		time.Date(2026, 3, 4, 5, 6, 7, 123456789, zone),
		time.Date(2026, 3, 4, 5, 6, 7, 1, time.UTC),
		time.Now(), // carries a monotonic reading
	}
	var drafts []history.Draft
	for i, at := range times {
		d := Draft(g.ID, "alice", fmt.Sprint(i), "x")
		d.SentAt = at
		drafts = append(drafts, d)
	}
	res := MustCommit(t, s, drafts...)
	got := PageAll(t, s, g.ID, "", 10)
	if len(got) != len(times) {
		t.Fatalf("Page returned %d messages, want %d", len(got), len(times))
	}
	for i, at := range times {
		for _, m := range []history.Message{res[i].Message, got[i]} {
			if !m.SentAt.Equal(at) || m.SentAt.Location() != time.UTC || m.SentAt.Nanosecond() != at.Nanosecond() {
				t.Errorf("SentAt %v came back as %v (want the same instant, in UTC, to the nanosecond)", at, m.SentAt)
			}
		}
	}
}

func testPurgeHistory(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	a := mustDirect(t, s, "alice", "bob")
	b := mustGroup(t, s, "carol", "b", "alice")
	before := maybeHeads(t, s)
	now := time.Now()
	old := func(chatID, sender, key string, age time.Duration) history.Draft {
		d := Draft(chatID, sender, key, "old")
		d.SentAt = now.Add(-age)
		return d
	}
	res := MustCommit(t, s,
		old(a.ID, "alice", "o1", 100*24*time.Hour),
		old(a.ID, "bob", "o2", 99*24*time.Hour),
		old(b.ID, "carol", "o3", 98*24*time.Hour),
		Draft(a.ID, "alice", "n1", "new"),
		old(b.ID, "alice", "n2", 89*24*time.Hour),
	)
	cutoff := now.Add(-90 * 24 * time.Hour)

	if _, err := s.PurgeHistory(ctx, cutoff, 0); err == nil {
		t.Error("PurgeHistory(limit 0): no error")
	}
	n, err := s.PurgeHistory(ctx, cutoff, 2)
	if err != nil || n != 2 {
		t.Fatalf("PurgeHistory(limit 2) = %d, %v; want 2", n, err)
	}
	n, err = s.PurgeHistory(ctx, cutoff, 10)
	if err != nil || n != 1 {
		t.Fatalf("second PurgeHistory = %d, %v; want 1", n, err)
	}
	n, err = s.PurgeHistory(ctx, cutoff, 10)
	if err != nil || n != 0 {
		t.Fatalf("third PurgeHistory = %d, %v; want 0", n, err)
	}

	if got := ids(PageAll(t, s, a.ID, "", 10)); !slices.Equal(got, []string{res[3].Message.ID}) {
		t.Errorf("chat a after purge = %v, want only n1", got)
	}
	if got := ids(PageAll(t, s, b.ID, "", 10)); !slices.Equal(got, []string{res[4].Message.ID}) {
		t.Errorf("chat b after purge = %v, want only n2", got)
	}
	// A purged cursor starts over at the retained beginning.
	if got := ids(PageAll(t, s, a.ID, res[0].Message.ID, 10)); !slices.Equal(got, []string{res[3].Message.ID}) {
		t.Errorf("paging from a purged message = %v, want n1", got)
	}
	// A purged key can no longer be deduplicated; that is expected, but the
	// chat itself is untouched.
	if _, err := s.Chat(ctx, a.ID); err != nil {
		t.Errorf("Chat after purge: %v", err)
	}
	if log, ok := s.(outbox.Log); ok {
		for _, row := range scanSince(t, log, before) {
			if row.Message.ID != res[3].Message.ID && row.Message.ID != res[4].Message.ID {
				t.Errorf("outbox row %d of purged message %s outlived its history", row.Pos, row.Message.ID)
			}
		}
	}
	// Sequences and outbox positions are never reused, not even once the
	// newest message and its outbox rows are purged.
	last := MustCommit(t, s, old(b.ID, "carol", "o4", 95*24*time.Hour))[0]
	if n, err := s.PurgeHistory(ctx, cutoff, 10); err != nil || n != 1 {
		t.Fatalf("PurgeHistory of the newest message = %d, %v; want 1", n, err)
	}
	next := MustCommit(t, s, Draft(b.ID, "carol", "n3", "new"))[0]
	if next.Message.Seq <= last.Message.Seq {
		t.Errorf("Seq after purging the newest message = %d, want above its %d", next.Message.Seq, last.Message.Seq)
	}
	for i, d := range next.Deliveries {
		for _, o := range last.Deliveries {
			if d.Partition == o.Partition && d.Pos <= o.Pos {
				t.Errorf("delivery %d after the purge at position %d, not above the purged %d", i, d.Pos, o.Pos)
			}
		}
	}
}

func testSaveReads(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	d := mustDirect(t, s, "alice", "bob")
	res := MustCommit(t, s, Draft(d.ID, "alice", "1", "x"), Draft(d.ID, "alice", "2", "y"))
	now := time.Now()
	if err := s.SaveReads(ctx, nil); err != nil {
		t.Errorf("SaveReads(nil): %v", err)
	}
	reads := []history.Read{
		{ChatID: d.ID, UserID: "bob", MessageID: res[0].Message.ID, At: now},
		{ChatID: d.ID, UserID: "bob", MessageID: res[1].Message.ID, At: now.Add(time.Millisecond)},
		{ChatID: d.ID, UserID: "alice", MessageID: res[1].Message.ID, At: now},
	}
	if err := s.SaveReads(ctx, reads); err != nil {
		t.Fatalf("SaveReads: %v", err)
	}
	if err := s.SaveReads(ctx, reads[:1]); err != nil {
		t.Fatalf("SaveReads again: %v", err)
	}
}

func testPing(t *testing.T, s history.Store) {
	if err := s.Ping(ctxFor(t)); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

// testFleetRecord: a fresh store has no fleet identity; SetFleet records
// one, a later SetFleet replaces it, and the outbox id (the other meta
// fact) is untouched (history.FleetRecorder; issue 24, point 1).
func testFleetRecord(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	fr, ok := s.(history.FleetRecorder)
	if !ok {
		t.Fatalf("%T does not implement history.FleetRecorder", s)
	}
	var idBefore string
	log, hasLog := s.(outbox.Log)
	if hasLog {
		var err error
		if idBefore, err = log.ID(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := fr.Fleet(ctx); err != nil || v != "" {
		t.Fatalf("fresh store: Fleet = %q, %v; want \"\", nil", v, err)
	}
	for _, want := range []string{`{"redis":"127.0.0.1:6379 db 0"}`, `{"redis":"127.0.0.1:6379 db 1"}`} {
		if err := fr.SetFleet(ctx, want); err != nil {
			t.Fatal(err)
		}
		if v, err := fr.Fleet(ctx); err != nil || v != want {
			t.Fatalf("after SetFleet(%q): Fleet = %q, %v", want, v, err)
		}
	}
	if hasLog {
		if id, err := log.ID(ctx); err != nil || id != idBefore {
			t.Fatalf("outbox id %q (%v) after SetFleet, was %q", id, err, idBefore)
		}
	}
}

// testProbeWrite: the write probe succeeds on a working store and changes
// nothing a client or the outbox can see (history.WriteProber).
func testProbeWrite(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	p, ok := s.(history.WriteProber)
	if !ok {
		t.Fatalf("%T does not implement history.WriteProber", s)
	}
	chat := mustDirect(t, s, "alice", "bob")
	MustCommit(t, s, Draft(chat.ID, "alice", "c1", "hello"))
	before := maybeHeads(t, s)
	var idBefore string
	log, hasLog := s.(outbox.Log)
	if hasLog {
		idBefore, _ = log.ID(ctx)
	}
	for range 3 {
		if err := p.ProbeWrite(ctx); err != nil {
			t.Fatalf("ProbeWrite on a working store: %v", err)
		}
	}
	if got := PageAll(t, s, chat.ID, "", 100); len(got) != 1 {
		t.Fatalf("history holds %d messages after the probes, want 1", len(got))
	}
	if hasLog {
		if id, _ := log.ID(ctx); id != idBefore {
			t.Fatalf("outbox id %q after the probes, was %q", id, idBefore)
		}
		if after := maybeHeads(t, s); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("outbox heads %v after the probes, were %v", after, before)
		}
	}
}
