package loadgen

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/server"
)

func shortConfig() Config {
	cfg := DefaultConfig()
	cfg.InProcess = true
	cfg.Clients, cfg.Rate, cfg.Duration, cfg.Drain = 20, 100, 2*time.Second, 20*time.Second
	cfg.Server.Tuning.GCGrace = 200 * time.Millisecond
	cfg.Server.Tuning.GCInterval = 100 * time.Millisecond
	return cfg
}

func TestPairsReconcileWithNothingLost(t *testing.T) {
	t.Parallel()
	cfg := shortConfig()
	var prof bytes.Buffer
	cfg.CPUProfile = &prof
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", rep)
	if rep.Accepted < 100 || rep.Lost != 0 || rep.Expected != rep.Accepted {
		t.Fatalf("accepted %d, expected %d, lost %d", rep.Accepted, rep.Expected, rep.Lost)
	}
	if rep.OutboxFinal != 0 {
		t.Fatalf("outbox did not drain: %d rows left", rep.OutboxFinal)
	}
	// The load generator's own CPU: measured over the window and the
	// whole run, and said to include the in-process server's.
	if rep.LoadgenCPUWindow <= 0 || rep.LoadgenCPUTotal < rep.LoadgenCPUWindow || rep.LoadgenWindow < cfg.Duration ||
		rep.LoadgenCPUWindowUser+rep.LoadgenCPUWindowSys != rep.LoadgenCPUWindow {
		t.Fatalf("loadgen CPU: window %v (user %v, sys %v) over %v, whole run %v", rep.LoadgenCPUWindow,
			rep.LoadgenCPUWindowUser, rep.LoadgenCPUWindowSys, rep.LoadgenWindow, rep.LoadgenCPUTotal)
	}
	if s := rep.String(); !strings.Contains(s, "\nloadgen CPU ") || !strings.Contains(s, "not separable") {
		t.Fatalf("the report does not state the load generator's CPU, or not that it includes the server's:\n%s", s)
	}
	if prof.Len() == 0 {
		t.Fatal("Config.CPUProfile got no profile")
	}
}

func TestReportStatesLoadgenCPUPerFrame(t *testing.T) {
	t.Parallel()
	rep := &Report{Clients: 2, GroupSize: 2, Frames: 1000, ServerPeakRSS: 1 << 20, ServerCPUSeconds: 3, SendsRetried: 7,
		LoadgenCPUWindow: 1500 * time.Millisecond, LoadgenCPUWindowUser: time.Second, LoadgenCPUWindowSys: 500 * time.Millisecond,
		LoadgenWindow: 21 * time.Second, LoadgenCPUTotal: 2 * time.Second}
	s := rep.String()
	want := "loadgen CPU              1.50 s over sending and drain (21s: user 1.00 s + sys 0.50 s), 2.00 s whole run; 1500.0 µs per frame\n"
	if !strings.Contains(s, "server CPU               3.0 s\n"+want) {
		t.Fatalf("want the server CPU line, then\n%s\ngot\n%s", want, s)
	}
	if strings.Contains(s, "separable") {
		t.Fatalf("a child-process server is separable:\n%s", s)
	}
	if !strings.Contains(s, "\nsends retried            7 (") {
		t.Fatalf("the report does not state the sends retried (answers such as overloaded, which end in no error):\n%s", s)
	}
	rep.LoadgenCPUWindow = 0
	if s := rep.String(); strings.Contains(s, "loadgen CPU") {
		t.Fatalf("unknown CPU rendered:\n%s", s)
	}
}

func TestGroupsReconcileWithNothingLost(t *testing.T) {
	t.Parallel()
	cfg := shortConfig()
	cfg.Clients, cfg.GroupSize = 20, 5
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", rep)
	if rep.Lost != 0 || rep.Expected != rep.Accepted*4 {
		t.Fatalf("accepted %d, expected %d (want 4 per message), lost %d", rep.Accepted, rep.Expected, rep.Lost)
	}
}

// lyingStore answers every 10th draft as committed without writing it: a
// G1 violation the reconciliation must report as lost.
type lyingStore struct {
	history.Store
	n atomic.Int64
}

func (s *lyingStore) Commit(ctx context.Context, drafts []history.Draft) ([]history.Result, error) {
	var keep []history.Draft
	var fake []int
	for i, d := range drafts {
		if s.n.Add(1)%10 == 0 {
			fake = append(fake, i)
			continue
		}
		keep = append(keep, d)
	}
	res, err := s.Store.Commit(ctx, keep)
	if err != nil {
		return nil, err
	}
	out := make([]history.Result, 0, len(drafts))
	for i, d := range drafts {
		if len(fake) > 0 && fake[0] == i {
			fake = fake[1:]
			out = append(out, history.Result{Message: history.Message{ID: d.ID, ChatID: d.ChatID, SenderID: d.SenderID,
				CorrelationID: d.CorrelationID, Body: d.Body, SentAt: d.SentAt}})
			continue
		}
		out = append(out, res[0])
		res = res[1:]
	}
	return out, nil
}

func TestReconciliationCatchesALyingStore(t *testing.T) {
	t.Parallel()
	cfg := shortConfig()
	cfg.Drain = 2 * time.Second
	cfg.Server.WrapStore = func(s history.Store) history.Store { return &lyingStore{Store: s} }
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lost == 0 || rep.OK() {
		t.Fatalf("a store that acknowledged without writing lost nothing according to the report:\n%s", rep)
	}
	if want := rep.Accepted / 10; rep.Lost < want-2 || rep.Lost > want+2 {
		t.Fatalf("lost %d, want about %d (every 10th accepted)", rep.Lost, want)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, mut := range []func(*Config){
		func(c *Config) { c.Clients = 1 },
		func(c *Config) { c.GroupSize = 1 },
		func(c *Config) { c.Clients, c.GroupSize = 3, 2 },
		func(c *Config) { c.Rate = 0 },
		func(c *Config) { c.Duration = 0 },
		func(c *Config) { c.URL = "http://x"; c.Secret = "" },
	} {
		cfg := DefaultConfig()
		cfg.Server = server.DefaultConfig()
		mut(&cfg)
		if _, err := Run(context.Background(), cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}

// A run where nothing arrived live is a failure even with nothing lost:
// everything came from the final history sync, so live delivery is broken.
func TestReportFlagsNoLiveDeliveries(t *testing.T) {
	r := &Report{Clients: 10, Accepted: 50, Expected: 50, Received: 50, Frames: 0}
	if r.OK() || !strings.Contains(strings.Join(r.Problems(), ";"), "no live deliveries") {
		t.Fatalf("0 frames for 50 expected pairs: OK=%v problems=%v", r.OK(), r.Problems())
	}
	if !strings.Contains(r.String(), "FAIL: no live deliveries") {
		t.Fatalf("verdict line does not say it:\n%s", r)
	}
	r.Frames = 50
	if !r.OK() {
		t.Fatalf("a healthy run is not OK: %v", r.Problems())
	}
	r.StuckClients, r.Frames = 10, 0 // every client stuck: nothing live is expected
	if !r.OK() {
		t.Fatalf("all clients stuck: %v", r.Problems())
	}
	r.StuckClients, r.Lost = 0, 3
	r.Frames = 47
	if r.OK() || !strings.Contains(r.String(), "FAIL: 3 lost") {
		t.Fatalf("3 lost: OK=%v\n%s", r.OK(), r)
	}
}

// TestTypingGroup: with TypingMembers the run adds a group whose members
// send typing frames alongside the message load; the frames the server
// forwards reach the other members, the messages still reconcile.
func TestTypingGroup(t *testing.T) {
	t.Parallel()
	cfg := shortConfig()
	cfg.Duration = 3 * time.Second
	cfg.TypingMembers, cfg.TypingInterval = 5, 2100*time.Millisecond // past the server's 2 s gate
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", rep)
	if rep.Lost != 0 || rep.Accepted < 100 {
		t.Fatalf("accepted %d, lost %d", rep.Accepted, rep.Lost)
	}
	// Each typist sends at 0-2.1 s and at 2.1-4.2 s if still inside 3 s:
	// 5 to 10 frames, each forwarded to 4 members.
	if rep.TypingMembers != 5 || rep.TypingSent < 5 || rep.TypingReceived < 4*5 || rep.TypingReceived > 4*rep.TypingSent {
		t.Fatalf("typing: %d members, %d sent, %d received (want 4 per frame sent)", rep.TypingMembers, rep.TypingSent, rep.TypingReceived)
	}
	if !strings.Contains(rep.String(), "typing") {
		t.Errorf("the report does not show the typing group:\n%s", rep)
	}
}
