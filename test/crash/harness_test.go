// Package crash_test kills and restarts a real `tetra serve` child process
// under load and reconciles every accepted message afterwards (issue 7).
package crash_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/internal/serveproc"
	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/auth"
	"github.com/tetra-messenger/tetra/workload/client"
	"github.com/tetra-messenger/tetra/workload/protocol"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBinary()
	os.Exit(code)
}

// proc is the `tetra serve` child; start/kill/term it any number of times
// on the same data, secret and address. Each run logs to a file of its own.
type proc struct {
	t      *testing.T
	sp     serveproc.Proc
	logDir string
	runs   int
}

func newProc(t *testing.T, addr, secret string, extra ...string) *proc {
	p := &proc{t: t, logDir: t.TempDir(), sp: serveproc.Proc{Bin: testenv.TetraBinary(t), Addr: addr,
		Args: append([]string{"serve", "--addr", addr, "--log-level", "info",
			"--ping-interval", "1s", "--ping-timeout", "2s", "--poll-interval", "20ms", "--gc-interval", "100ms",
			"--lease", "3s", "--max-conns-per-user", "8"}, extra...),
		Env: append(os.Environ(), "TETRA_JWT_SECRET="+secret)}}
	t.Cleanup(func() {
		_, _ = p.sp.Stop(syscall.SIGKILL, 10*time.Second)
		if t.Failed() {
			for i := 1; i <= p.runs; i++ {
				b, _ := os.ReadFile(p.logPath(i))
				if len(b) > 4000 {
					b = b[len(b)-4000:]
				}
				t.Logf("server log of run %d (tail):\n%s", i, b)
			}
		}
	})
	return p
}

func (p *proc) logPath(run int) string {
	return filepath.Join(p.logDir, fmt.Sprintf("run-%d.log", run))
}

// start launches the child and waits for /healthz.
func (p *proc) start() {
	p.t.Helper()
	p.runs++
	p.sp.LogPath = p.logPath(p.runs)
	if err := p.sp.Start(context.Background(), 30*time.Second); err != nil {
		p.t.Fatalf("run %d: %v", p.runs, err)
	}
}

// signal sends sig and waits for the exit; it returns how long that took
// and the exit error.
func (p *proc) signal(sig os.Signal, timeout time.Duration) (time.Duration, error) {
	p.t.Helper()
	took, err := p.sp.Stop(sig, timeout)
	if errors.Is(err, serveproc.ErrKilled) {
		p.t.Fatalf("tetra serve did not exit within %s of %v", timeout, sig)
	}
	return took, err
}

func (p *proc) kill() { p.signal(syscall.SIGKILL, 10*time.Second) }

// ---- load and reconciliation ----

type sent struct {
	corr, messageID, chatID, sender string
}

// load is pairs of Go clients sending to each other with explicit
// correlation ids, retrying until accepted.
type load struct {
	t      *testing.T
	url    string
	signer *auth.Signer
	users  []*user
	chats  map[string][2]*user // chatId -> pair

	mu       sync.Mutex
	accepted map[string]sent // corr -> answer
	closes   map[int]int     // close code -> count
	mismatch []string

	stop context.CancelFunc
	wg   sync.WaitGroup
}

type user struct {
	name string
	c    *client.Client
	chat string
	peer *user
	mu   sync.Mutex
	got  map[string]protocol.Message // OnMessage, by messageId
	dups int
	next int
}

func newLoad(t *testing.T, url, secret string, pairs int) *load {
	t.Helper()
	s, err := auth.NewSigner([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	l := &load{t: t, url: url, signer: s, chats: map[string][2]*user{}, accepted: map[string]sent{}, closes: map[int]int{}}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	tag := fmt.Sprintf("%04x", rand.IntN(1<<16))
	for i := range pairs {
		a := &user{name: fmt.Sprintf("u%s-%d-a", tag, i), got: map[string]protocol.Message{}}
		b := &user{name: fmt.Sprintf("u%s-%d-b", tag, i), got: map[string]protocol.Message{}}
		a.peer, b.peer = b, a
		for _, u := range []*user{a, b} {
			u := u
			tok, _ := s.Issue(u.name, 0)
			c, err := client.Dial(ctx, client.Config{URL: url, Token: tok,
				BackoffMin: 50 * time.Millisecond, BackoffMax: 400 * time.Millisecond,
				OnMessage: func(m protocol.Message) {
					u.mu.Lock()
					if _, dup := u.got[m.MessageID]; dup {
						u.dups++ // the client must report each messageId once
					}
					u.got[m.MessageID] = m
					u.mu.Unlock()
				},
				OnState: func(sc client.StateChange) {
					if sc.CloseCode != 0 {
						l.mu.Lock()
						l.closes[sc.CloseCode]++
						l.mu.Unlock()
					}
				},
			})
			if err != nil {
				t.Fatalf("dial %s: %v", u.name, err)
			}
			t.Cleanup(func() { c.Close() })
			u.c = c
			l.users = append(l.users, u)
		}
		chat, err := a.c.CreateDirect(ctx, b.name)
		if err != nil {
			t.Fatal(err)
		}
		a.chat, b.chat = chat.ChatID, chat.ChatID
		l.chats[chat.ChatID] = [2]*user{a, b}
	}
	return l
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
// reconnects; a context timeout retries again with the same key). It is
// not cancelled by stop: a message whose send began is driven to the end.
func (l *load) sendUntilAccepted(u *user, corr string) {
	body := "body of " + corr
	deadline := time.Now().Add(45 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		acc, err := u.c.SendWithID(ctx, u.chat, corr, body)
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

// resendSome sends n already accepted correlation ids again: each must be
// answered with its original messageId (idempotency across restarts).
func (l *load) resendSome(n int) {
	l.mu.Lock()
	var some []sent
	for _, s := range l.accepted {
		if len(some) == n {
			break
		}
		some = append(some, s)
	}
	l.mu.Unlock()
	byName := map[string]*user{}
	for _, u := range l.users {
		byName[u.name] = u
	}
	for _, s := range some {
		l.sendUntilAccepted(byName[s.sender], s.corr)
	}
}

// finish stops the load and waits for every started send to be accepted.
func (l *load) finish() {
	l.stop()
	l.wg.Wait()
}

// reconcile checks, after a final sync: history holds every accepted
// message exactly once (one row per correlationId, with the accepted
// messageId) and nothing else; every recipient's OnMessage set equals the
// messages its peer sent.
func (l *load) reconcile() {
	t := l.t
	t.Helper()
	l.mu.Lock()
	accepted := maps.Clone(l.accepted)
	mismatch := slices.Clone(l.mismatch)
	closes := maps.Clone(l.closes)
	l.mu.Unlock()
	for _, m := range mismatch {
		t.Errorf("idempotency broken: %s", m)
	}
	pages := map[string]testenv.HistoryPage{}
	for chatID, pair := range l.chats {
		c := pair[0]
		pages[chatID] = func(ctx context.Context, since string) ([]protocol.Message, bool, error) {
			return c.c.History(ctx, chatID, since, 500)
		}
	}
	answers := map[string]testenv.Sent{}
	for corr, s := range accepted {
		answers[corr] = testenv.Sent{MessageID: s.messageID, ChatID: s.chatID, Sender: s.sender}
	}
	total := testenv.CheckHistory(t, pages, answers)
	// Recipients: OnMessage equals what the peer sent, after a final sync.
	want := map[string][]string{}
	for _, s := range accepted {
		for _, u := range l.chats[s.chatID] {
			if u.name != s.sender {
				want[u.name] = append(want[u.name], s.messageID)
			}
		}
	}
	deadline := time.Now().Add(25 * time.Second)
	for _, u := range l.users {
		slices.Sort(want[u.name])
		for {
			u.mu.Lock()
			got := make([]string, 0, len(u.got))
			for id := range u.got {
				got = append(got, id)
			}
			dups := u.dups
			u.mu.Unlock()
			slices.Sort(got)
			if slices.Equal(got, want[u.name]) {
				if dups != 0 {
					t.Errorf("%s: OnMessage reported %d messageIds twice", u.name, dups)
				}
				break
			}
			if time.Now().After(deadline) {
				missing := 0
				for _, id := range want[u.name] {
					if _, ok := slices.BinarySearch(got, id); !ok {
						missing++
					}
				}
				t.Errorf("%s received %d messages, want %d (%d missing)", u.name, len(got), len(want[u.name]), missing)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("reconciled: %d accepted, %d in history, close codes seen %v", len(accepted), total, closes)
}
