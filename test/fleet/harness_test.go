package fleet_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/tetra-messenger/tetra/internal/serveproc"
	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/auth"
	"github.com/tetra-messenger/tetra/workload/client"
	"github.com/tetra-messenger/tetra/workload/protocol"
)

const secret = "fleet-test-secret-0123456789abcdef"

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBinary()
	os.Exit(code)
}

// proc is one `tetra serve` child of the fleet.
type proc struct {
	t       *testing.T
	name    string
	addr    string
	logPath string
	bin     string
	args    []string // as last started
	sp      *serveproc.Proc
}

// fleet is n children on one PostgreSQL database and one Redis prefix.
type fleet struct {
	t      *testing.T
	pgURL  string
	rdb    *goredis.Client // the index's Redis, for diagnostics
	prefix string
	procs  []*proc
	db     *pgx.Conn
	signer *auth.Signer
}

// newFleet starts n children, each with its own --index-owner and
// --data, all with the same --store, --index, --index-prefix and secret.
// extra flags are appended (later flags win).
func newFleet(t *testing.T, n int, extra ...string) *fleet {
	t.Helper()
	pgURL := testenv.Postgres(t)
	redisURL, prefix := testenv.Redis(t)
	bin := testenv.TetraBinary(t)
	f := &fleet{t: t, pgURL: pgURL, prefix: prefix}
	opt, err := goredis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	f.rdb = goredis.NewClient(opt)
	t.Cleanup(func() { f.rdb.Close() })
	s, err := auth.NewSigner([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	f.signer = s
	logDir := t.TempDir()
	for i := range n {
		p := &proc{t: t, name: fmt.Sprintf("p%d", i), addr: testenv.FreeAddr(t),
			logPath: filepath.Join(logDir, fmt.Sprintf("p%d.log", i))}
		args := append([]string{"serve", "--addr", p.addr, "--log-level", "info",
			"--data", t.TempDir(), "--store", pgURL,
			"--index", redisURL, "--index-prefix", prefix,
			"--index-owner", fmt.Sprintf("%sowner-%d", prefix, i),
			"--ping-interval", "1s", "--ping-timeout", "2s", "--poll-interval", "20ms",
			"--gc-interval", "200ms", "--gc-grace", "0", "--owner-ttl", "2s",
			"--lease", "60s", "--max-conns-per-user", "8"}, extra...)
		f.procs = append(f.procs, p)
		p.start(bin, args)
	}
	// Every child is killed when the test ends (SIGKILL also ends a
	// stopped process); on failure their log tails are printed.
	t.Cleanup(func() {
		for _, p := range f.procs {
			if p.sp != nil {
				_, _ = p.sp.Stop(syscall.SIGKILL, 10*time.Second)
			}
		}
		if t.Failed() {
			for _, p := range f.procs {
				b, _ := os.ReadFile(p.logPath)
				if len(b) > 6000 {
					b = b[len(b)-6000:]
				}
				t.Logf("log of %s (tail):\n%s", p.name, b)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	f.db = db
	return f
}

// start launches the child and waits for /healthz.
func (p *proc) start(bin string, args []string) {
	p.t.Helper()
	p.bin, p.args = bin, args
	p.sp = &serveproc.Proc{Bin: bin, Args: args, Addr: p.addr, LogPath: p.logPath,
		Env: append(os.Environ(), "TETRA_JWT_SECRET="+secret)}
	if err := p.sp.Start(context.Background(), 30*time.Second); err != nil {
		p.t.Fatalf("%s: %v", p.name, err)
	}
}

// kill SIGKILLs the child and waits for its exit.
func (p *proc) kill() {
	p.t.Helper()
	if _, err := p.sp.Stop(syscall.SIGKILL, 10*time.Second); errors.Is(err, serveproc.ErrKilled) {
		p.t.Fatalf("%s did not exit within 10 s of SIGKILL", p.name)
	}
}

// signal sends sig (SIGSTOP, SIGCONT) without waiting.
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.sp.Signal(sig); err != nil {
		p.t.Fatalf("%s: %v: %v", p.name, sig, err)
	}
}

// outboxRows is the outbox's rows as a table (id, recipient, history_id):
// the recipients of every record (schema 8) at their positions, less those
// under the line.
const outboxRows = `(SELECT o.id - o.n + r.ord AS id, r.recipient, o.history_id
	FROM outbox_messages AS o CROSS JOIN LATERAL unnest(o.recipients) WITH ORDINALITY AS r(recipient, ord)
	WHERE o.id - o.n + r.ord >= (SELECT below FROM outbox_line WHERE id = 1))`

// outboxCount counts outbox rows; with recipients, only theirs.
func (f *fleet) outboxCount(recipients ...string) int {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	var err error
	if len(recipients) == 0 {
		err = f.db.QueryRow(ctx, "SELECT count(*) FROM "+outboxRows+" AS o").Scan(&n)
	} else {
		err = f.db.QueryRow(ctx, "SELECT count(*) FROM "+outboxRows+" AS o WHERE recipient = ANY($1)", recipients).Scan(&n)
	}
	if err != nil {
		f.t.Fatalf("count outbox: %v", err)
	}
	return n
}

// holders says what holds the outbox's lowest rows: the lowest row and its
// recipient, the lowest pins and holds of partition 0 in the index (with
// the registration of each pinning connection, found in any owner's
// clients hash) and the owners that heartbeat. For a failure message: a
// drain that stalls names its cause.
func (f *fleet) holders() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	var low int64
	var rcpt string
	if err := f.db.QueryRow(ctx, "SELECT id, recipient FROM "+outboxRows+" AS o ORDER BY id LIMIT 1").Scan(&low, &rcpt); err == nil {
		fmt.Fprintf(&b, "lowest outbox row %d (recipient %s); ", low, rcpt)
	}
	pins, _ := f.rdb.ZRangeWithScores(ctx, f.prefix+"pins:0", 0, 4).Result()
	fmt.Fprintf(&b, "lowest pins:")
	owners, _ := f.rdb.SMembers(ctx, f.prefix+"owners").Result()
	for _, z := range pins {
		cid, _ := z.Member.(string)
		reg := "unregistered"
		for _, o := range owners {
			if r, err := f.rdb.HGet(ctx, f.prefix+"clients:"+o, cid).Result(); err == nil {
				reg = o + " " + r
			}
		}
		pend, _ := f.rdb.HLen(ctx, f.prefix+"st:"+cid).Result()
		fmt.Fprintf(&b, " [%s at %.0f, %d pending, %s]", cid, z.Score, pend, reg)
	}
	holds, _ := f.rdb.ZRangeWithScores(ctx, f.prefix+"holds:0", 0, 4).Result()
	fmt.Fprintf(&b, "; lowest holds:")
	for _, z := range holds {
		fmt.Fprintf(&b, " [%q at %.0f]", z.Member, z.Score)
	}
	fmt.Fprintf(&b, "; owners %v", owners)
	return b.String()
}

// outboxIDs returns the outbox row ids of recipients.
func (f *fleet) outboxIDs(recipients ...string) []int64 {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := f.db.Query(ctx, "SELECT id FROM "+outboxRows+" AS o WHERE recipient = ANY($1) ORDER BY id", recipients)
	if err != nil {
		f.t.Fatalf("outbox ids: %v", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		f.t.Fatalf("outbox ids: %v", err)
	}
	return ids
}

// outboxRowsOf counts the outbox rows of the given messageIds for the
// given recipients.
func (f *fleet) outboxRowsOf(messageIDs, recipients []string) int {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	err := f.db.QueryRow(ctx, `SELECT count(*) FROM `+outboxRows+` AS o JOIN history h ON h.id = o.history_id
		WHERE h.message_id = ANY($1) AND o.recipient = ANY($2)`, messageIDs, recipients).Scan(&n)
	if err != nil {
		f.t.Fatalf("count outbox rows of messages: %v", err)
	}
	return n
}

// countOf counts the outbox rows among ids that still exist.
func (f *fleet) countOf(ids []int64) int {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	if err := f.db.QueryRow(ctx, "SELECT count(*) FROM "+outboxRows+" AS o WHERE id = ANY($1)", ids).Scan(&n); err != nil {
		f.t.Fatalf("count outbox ids: %v", err)
	}
	return n
}

// ---- users, routing, load and reconciliation ----

type sent struct {
	corr, messageID, chatID, sender string
}

// user is one Go client. Its HTTP client dials the processes in the order
// route returns them (its home process first), so when the home process
// is dead (connection refused) it reconnects to a survivor.
type user struct {
	name   string
	home   int
	c      atomic.Pointer[client.Client]
	chat   string
	peer   *user
	target atomic.Int32 // the process its last connection was dialled to
	// skip is how many messages it leaves unacknowledged (the first ones
	// it receives); they pin the outbox on the process it is connected to.
	skip int

	mu      sync.Mutex
	got     map[string]protocol.Message // OnMessage, by messageId
	dups    int
	skipped []string
	closes  map[int]int // close code -> count
	next    int
}

// load is users sending to their peers with explicit correlation ids,
// retrying until accepted.
type load struct {
	t     *testing.T
	f     *fleet
	users []*user
	chats map[string][2]*user

	mu       sync.Mutex
	accepted map[string]sent // corr -> answer
	mismatch []string

	stop context.CancelFunc
	wg   sync.WaitGroup
}

func newLoad(t *testing.T, f *fleet) *load {
	return &load{t: t, f: f, chats: map[string][2]*user{}, accepted: map[string]sent{}}
}

// routedHTTP returns an HTTP client whose connections go to the first of
// order's processes that accepts a TCP connection; it records which.
func (f *fleet) routedHTTP(u *user, order []int) *http.Client {
	tr := &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var last error
			for _, i := range order {
				d := net.Dialer{Timeout: time.Second}
				c, err := d.DialContext(ctx, network, f.procs[i].addr)
				if err == nil {
					u.target.Store(int32(i))
					return c, nil
				}
				last = err
			}
			return nil, last
		},
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	return &http.Client{Transport: tr}
}

// addUser dials a client for a new user at home (then the other
// processes, in order, when home refuses).
func (l *load) addUser(name string, home int, skip int, only bool) *user {
	t := l.t
	t.Helper()
	u := &user{name: name, home: home, skip: skip, got: map[string]protocol.Message{}, closes: map[int]int{}}
	order := []int{home}
	if !only {
		for i := range l.f.procs {
			if i != home {
				order = append(order, i)
			}
		}
	}
	tok, err := l.f.signer.Issue(name, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Config{URL: "http://fleet.invalid", Token: tok,
		HTTPClient: l.f.routedHTTP(u, order),
		BackoffMin: 50 * time.Millisecond, BackoffMax: 400 * time.Millisecond,
		ManualAck: true,
		OnMessage: func(m protocol.Message) {
			u.mu.Lock()
			if _, dup := u.got[m.MessageID]; dup {
				u.dups++ // the client must report each messageId once
			}
			u.got[m.MessageID] = m
			ack := true
			if len(u.skipped) < u.skip {
				u.skipped = append(u.skipped, m.MessageID)
				ack = false
			}
			u.mu.Unlock()
			if c := u.c.Load(); ack && c != nil {
				_ = c.Ack(m.MessageID) // ErrNotConnected: redelivered or recovered
			}
		},
		OnState: func(sc client.StateChange) {
			if sc.CloseCode != 0 {
				u.mu.Lock()
				u.closes[sc.CloseCode]++
				u.mu.Unlock()
			}
		},
	})
	if err != nil {
		t.Fatalf("dial %s: %v", name, err)
	}
	t.Cleanup(func() { c.Close() })
	u.c.Store(c)
	return u
}

// pair adds a and b (on their homes) and a direct chat between them.
func (l *load) pair(a, b *user) {
	t := l.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	chat, err := a.c.Load().CreateDirect(ctx, b.name)
	if err != nil {
		t.Fatal(err)
	}
	a.chat, b.chat = chat.ChatID, chat.ChatID
	a.peer, b.peer = b, a
	l.chats[chat.ChatID] = [2]*user{a, b}
	l.users = append(l.users, a, b)
}

// run starts every user sending one message per interval until stopped;
// each send retries (same correlationId) until accepted.
func (l *load) run(interval time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	l.stop = cancel
	for _, u := range l.users {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			time.Sleep(time.Duration(rand.Int64N(int64(interval))))
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				u.next++
				corr := fmt.Sprintf("%s-%d", u.name, u.next)
				l.sendUntilAccepted(u, corr)
			}
		}()
	}
}

// sendUntilAccepted sends corr until accepted (the client retries across
// reconnects; a context timeout retries again with the same key).
func (l *load) sendUntilAccepted(u *user, corr string) {
	body := "body of " + corr
	deadline := time.Now().Add(45 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		acc, err := u.c.Load().SendWithID(ctx, u.chat, corr, body)
		cancel()
		if err == nil {
			l.record(sent{corr: corr, messageID: acc.MessageID, chatID: u.chat, sender: u.name})
			return
		}
		if client.CodeOf(err) != "" {
			l.t.Errorf("send %s refused: %v", corr, err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	l.t.Errorf("send %s never accepted", corr)
}

func (l *load) record(s sent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if prev, ok := l.accepted[s.corr]; ok && prev.messageID != s.messageID {
		l.mismatch = append(l.mismatch, fmt.Sprintf("%s: accepted as %s and as %s", s.corr, prev.messageID, s.messageID))
	}
	l.accepted[s.corr] = s
}

// finish stops the load and waits for every started send to be accepted.
func (l *load) finish() {
	l.stop()
	l.wg.Wait()
}

func (l *load) acceptedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.accepted)
}

// reconcile checks, message by message: history holds every accepted
// message exactly once (one row per correlationId, with the accepted
// messageId) and nothing else; every recipient's OnMessage set equals the
// messages its peer sent, each reported once.
func (l *load) reconcile() {
	t := l.t
	t.Helper()
	l.mu.Lock()
	accepted := maps.Clone(l.accepted)
	mismatch := slices.Clone(l.mismatch)
	l.mu.Unlock()
	for _, m := range mismatch {
		t.Errorf("idempotency broken: %s", m)
	}
	pages := map[string]testenv.HistoryPage{}
	for chatID, pair := range l.chats {
		c := pair[0]
		pages[chatID] = func(ctx context.Context, since string) ([]protocol.Message, bool, error) {
			return c.c.Load().History(ctx, chatID, since, 500)
		}
	}
	answers := map[string]testenv.Sent{}
	for corr, s := range accepted {
		answers[corr] = testenv.Sent{MessageID: s.messageID, ChatID: s.chatID, Sender: s.sender}
	}
	total := testenv.CheckHistory(t, pages, answers)
	want := map[string][]string{}
	for _, s := range accepted {
		for _, u := range l.chats[s.chatID] {
			if u.name != s.sender {
				want[u.name] = append(want[u.name], s.messageID)
			}
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, u := range l.users {
		slices.Sort(want[u.name])
		for {
			u.mu.Lock()
			got := slices.Sorted(maps.Keys(u.got))
			dups := u.dups
			u.mu.Unlock()
			if slices.Equal(got, want[u.name]) {
				if dups != 0 {
					t.Errorf("%s: OnMessage reported %d messageIds twice", u.name, dups)
				}
				break
			}
			if time.Now().After(deadline) {
				var missing, extra []string
				for _, id := range want[u.name] {
					if _, ok := slices.BinarySearch(got, id); !ok {
						missing = append(missing, id)
					}
				}
				for _, id := range got {
					if _, ok := slices.BinarySearch(want[u.name], id); !ok {
						extra = append(extra, id)
					}
				}
				t.Errorf("%s (home p%d, now on p%d) received %d messages, want %d: missing %v, unexpected %v",
					u.name, u.home, u.target.Load(), len(got), len(want[u.name]), short(missing), short(extra))
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("reconciled: %d accepted, %d in history", len(accepted), total)
}

func short(ids []string) string {
	if len(ids) > 5 {
		return strings.Join(ids[:5], ",") + fmt.Sprintf(",... (%d)", len(ids))
	}
	return strings.Join(ids, ",")
}

// eventually polls cond every 100 ms until it holds or d passes.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}
