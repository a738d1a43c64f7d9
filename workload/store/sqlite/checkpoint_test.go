package sqlite

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/history/historytest"
)

// TestDeleteErasesTextFromFiles: a deleted message's body, and the bodies
// of its edits, are erased from storage, not hidden (PROTOCOL.md §7.3):
// with secure_delete (on in the writer's DSN) and the WAL checkpointed,
// neither the database file nor the -wal file holds the text. A message
// that was not deleted is found in the same files, so the search can fail.
// The outbox rows of the messages are in the same file (they carry no
// body, only the history id).
func TestDeleteErasesTextFromFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "tetra.db")
	db := openDB(t, DefaultConfig(path))
	g := mustGroup(t, db, "alice", "g", "bob")
	tag := strings.ToLower(ulid.Make().String())
	original, edited, kept := "original-secret-"+tag, "edited-secret-"+tag, "kept-text-"+tag
	// Bodies long enough to overflow a 4 KiB page, and short ones.
	long := strings.Repeat("L", 3000) + "long-secret-" + tag
	m := historytest.MustCommit(t, db, historytest.Draft(g.ID, "alice", "c1", original))[0].Message
	historytest.MustCommit(t, db, historytest.EditDraft(g.ID, "alice", "c2", m.ID, edited))
	historytest.MustCommit(t, db, historytest.EditDraft(g.ID, "alice", "c3", m.ID, long))
	historytest.MustCommit(t, db, historytest.Draft(g.ID, "bob", "c4", kept))
	historytest.MustCommit(t, db, historytest.DeleteDraft(g.ID, "alice", "c5", m.ID))

	var busy, logFrames, done int
	if err := db.w.QueryRowContext(t.Context(), `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &logFrames, &done); err != nil || busy != 0 {
		t.Fatalf("wal_checkpoint(TRUNCATE) = busy %d, %v", busy, err)
	}
	checkErased(t, path, kept, original, edited, "long-secret-"+tag)
}

// TestDeleteErasesTextFromTheWAL: nobody checkpoints by hand, as in a
// running server: the WAL would hold the deleted body until later commits
// overwrite its frames (a fresh user found it there minutes after the
// delete), so the delete's commit has the checkpointer checkpoint and truncate it.
func TestDeleteErasesTextFromTheWAL(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tetra.db")
	db := openDB(t, DefaultConfig(path))
	g := mustGroup(t, db, "alice", "g", "bob")
	tag := strings.ToLower(ulid.Make().String())
	secret, kept := "wal-secret-"+tag, "wal-kept-"+tag
	m := historytest.MustCommit(t, db, historytest.Draft(g.ID, "alice", "c1", secret))[0].Message
	historytest.MustCommit(t, db, historytest.Draft(g.ID, "bob", "c2", kept))
	historytest.MustCommit(t, db, historytest.DeleteDraft(g.ID, "alice", "c3", m.ID))
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !bytes.Contains(readFiles(t, path), []byte(secret)) {
			break
		}
	}
	checkErased(t, path, kept, secret)
}

// readFiles returns the database file and its -wal, concatenated.
func readFiles(t *testing.T, path string) []byte {
	t.Helper()
	var all []byte
	for _, f := range []string{path, path + "-wal"} {
		b, err := os.ReadFile(f)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return all
}

// checkErased fails the test when the database files at path hold one of
// secrets, or do not hold kept (then the search could not find anything).
func checkErased(t *testing.T, path, kept string, secrets ...string) {
	t.Helper()
	all := readFiles(t, path)
	if !bytes.Contains(all, []byte(kept)) {
		t.Fatalf("the files do not hold the kept message %q: the search cannot find anything", kept)
	}
	for _, secret := range secrets {
		if bytes.Contains(all, []byte(secret)) {
			t.Errorf("the database files still hold %q after the delete", secret)
		}
	}
}

// TestCheckpointsLeaveCommitsAlone: the writer does not checkpoint the WAL
// inside its commits (its automatic checkpoint is only a backstop, far
// above the WAL's usual length); the checkpointer copies the WAL beside it
// and leaves it wholly copied, so the writer starts it again from its
// beginning and the file stays near walCheckpointPages frames. Without the
// checkpointer, or with its PASSIVE step alone (then the WAL is never
// wholly copied while commits go on, and never starts again), the WAL of
// these 8 x checkpointMessages messages grows to about 100 MiB; with it,
// to about 30.
func TestCheckpointsLeaveCommitsAlone(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "tetra.db")
	db := openDB(t, DefaultConfig(path))
	var auto int
	if err := db.w.QueryRowContext(ctx, `PRAGMA wal_autocheckpoint`).Scan(&auto); err != nil || auto != walBackstopPages {
		t.Fatalf("writer's wal_autocheckpoint = %d, %v; want the backstop %d", auto, err, walBackstopPages)
	}
	const chats = 200
	ids := make([]string, chats)
	for i := range ids {
		c, _, err := db.CreateDirect(ctx, fmt.Sprintf("u%03d", i), fmt.Sprintf("v%03d", i))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = c.ID
	}
	drafts := make([]history.Draft, 36)
	n := 0
	for n < 8*checkpointMessages {
		for i := range drafts {
			c := n % chats
			drafts[i] = historytest.Draft(ids[c], fmt.Sprintf("u%03d", c), strconv.Itoa(n), strings.Repeat("x", 100))
			n++
		}
		if _, err := db.Commit(ctx, drafts); err != nil {
			t.Fatal(err)
		}
	}
	if got := db.ckpt.passes.Load(); got < 2 {
		t.Errorf("the checkpointer copied the WAL %d times for %d messages, want at least 2", got, n)
	}
	st, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if limit := int64(2 * walCheckpointPages * 4096); st.Size() > limit {
		t.Errorf("WAL of %d MiB after %d messages, want at most %d MiB: the checkpointer does not keep it short", st.Size()>>20, n, limit>>20)
	}
}
