package loadgen

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetra-messenger/tetra/workload/auth"
	"github.com/tetra-messenger/tetra/workload/client"
	"github.com/tetra-messenger/tetra/workload/config"
	"github.com/tetra-messenger/tetra/workload/protocol"
	"github.com/tetra-messenger/tetra/workload/server"
)

// Config configures a load run. Zero fields take the defaults in
// DefaultConfig.
type Config struct {
	// URL targets a running server, or a comma-separated list of the base
	// URLs of a running fleet sharing one store, index and Secret; empty
	// starts the server(s) (see InProcess and Replicas).
	URL string
	// Secret is the target server's TETRA_JWT_SECRET, needed with URL to
	// mint client and admin tokens.
	Secret string
	// InProcess starts the server inside this process instead of as a
	// child process; the report then has no server RSS or CPU.
	InProcess bool
	// Replicas is the number of `tetra serve` child processes the run
	// starts: at least 1 (DefaultConfig's). More than one need a shared store (PostgreSQL)
	// and index (Redis): each gets its own --index-owner and the run's
	// --index-prefix, and the clients are spread over them round-robin.
	Replicas int
	// ServerBinary is the tetra binary started as child processes;
	// default this executable.
	ServerBinary string
	// connected, when set (tests), is called once every client connected.
	connected func(*fleet)
	// Server is the configuration of the server the run starts (its
	// tuning is passed as flags to a child process). Addr and DataDir are
	// chosen by the run.
	Server server.Config
	// Clients is the number of WebSocket clients (users), default 200.
	Clients int
	// GroupSize: 2 pairs the clients in direct chats (default); larger
	// values put them in group chats of that many members.
	GroupSize int
	// Rate is the total send rate in messages per second, default 500.
	Rate float64
	// Duration of the send phase, default 20 s.
	Duration time.Duration
	// Drain is the longest wait after the send phase for deliveries and
	// for the outbox to empty, default 30 s.
	Drain time.Duration
	// BodyBytes is the size of each message body, default 64.
	BodyBytes int
	// Progress receives a progress line every second; nil for none.
	Progress io.Writer
	// Logger for the in-process server and diagnostics; default discards.
	Logger *slog.Logger
	// StuckShare is the share of clients (0..1) that acknowledge nothing
	// (client.Config.ManualAck, never Ack): the server must withdraw them,
	// and they must still find every message in history at the end.
	StuckShare float64
	// SlowShare is the share of clients that acknowledge each message
	// SlowAckDelay after receiving it.
	SlowShare float64
	// SlowAckDelay is the ack delay of the slow clients, default 2 s.
	SlowAckDelay time.Duration
	// Senders is how many members of each chat send (the first ones);
	// 0, the default, means every member. With GroupSize 10 and Senders
	// 3, three members of every group send and seven only receive.
	Senders int
	// Window is how many sends a sender pipelines at once (a burst): it
	// writes Window sends back to back, then the next burst once all were
	// answered and its interval passed. The average rate is still Rate.
	// Default 1 (evenly spaced sends).
	Window int
	// IndexFault, when set, hits the waterline index (Redis) during the
	// send phase: "flush" deletes every key of the run's prefix (what
	// FLUSHALL does to this deployment, without touching others on a
	// shared Redis); "restart" SIGKILLs a redis-server the run starts for
	// itself and starts it again empty on the same port; "stale" moves
	// the run's Redis address (a proxy the run starts) from the master to
	// a replica that stopped replicating IndexFaultLag earlier. "restart"
	// and "stale" need redis-server on PATH and replace Server.Index.
	IndexFault string
	// IndexFaultAt is when the first fault hits, from the start of the
	// send phase; default a third of Duration.
	IndexFaultAt time.Duration
	// IndexFaultEvery repeats the fault at this interval (0: once).
	IndexFaultEvery time.Duration
	// IndexFaultLag is how far behind the master the stale replica is;
	// default 2 s.
	IndexFaultLag time.Duration
	// TypingMembers, when > 0, adds a group of that many clients of their
	// own (2 to 1,000, the group limit) that send typing frames during the
	// send phase (typing.go); 0, the default, none.
	TypingMembers int
	// TypingInterval is how often each of them sends one; default
	// protocol.TypingInterval (2 s: a client whose user keeps typing).
	TypingInterval time.Duration
	// CPUProfile, when set, receives a CPU profile (runtime/pprof) of this
	// process from the start of sending to the end of the drain: the load
	// generator's own cost, and the server's too with InProcess.
	CPUProfile io.Writer
}

// DefaultConfig is the issue's acceptance run: 200 clients in pairs at
// 500 msg/s for 20 s.
func DefaultConfig() Config {
	return Config{Server: server.DefaultConfig(), Clients: 200, GroupSize: 2, Rate: 500,
		Duration: 20 * time.Second, Drain: 30 * time.Second, BodyBytes: 64, Replicas: 1}
}

func (c *Config) validate() error {
	switch {
	case c.Clients < 2:
		return fmt.Errorf("clients must be >= 2, got %d", c.Clients)
	case c.GroupSize < 2 || c.GroupSize > c.Clients:
		return fmt.Errorf("group size must be between 2 and clients (%d), got %d", c.Clients, c.GroupSize)
	case c.Clients%c.GroupSize != 0:
		// A client left over would be in no chat: it would take its share
		// of the rate and send nothing.
		return fmt.Errorf("clients (%d) must be a multiple of the group size (%d): every client is in exactly one chat", c.Clients, c.GroupSize)
	case c.Rate <= 0:
		return fmt.Errorf("rate must be > 0, got %v", c.Rate)
	case c.Duration <= 0:
		return fmt.Errorf("duration must be > 0, got %v", c.Duration)
	case c.BodyBytes < 24:
		return fmt.Errorf("body bytes must be >= 24 (the timestamp it carries), got %d", c.BodyBytes)
	case c.URL != "" && c.Secret == "":
		return errors.New("a run against --url needs the server's TETRA_JWT_SECRET to mint tokens")
	case c.StuckShare < 0 || c.SlowShare < 0 || c.StuckShare+c.SlowShare > 1:
		return fmt.Errorf("stuck share (%v) and slow share (%v) must be >= 0 and sum to at most 1", c.StuckShare, c.SlowShare)
	case c.SlowAckDelay < 0:
		return fmt.Errorf("slow ack delay must be >= 0, got %v", c.SlowAckDelay)
	case c.Replicas < 1:
		return fmt.Errorf("replicas must be >= 1, got %d", c.Replicas)
	case c.URL != "" && len(splitURLs(c.URL)) == 0:
		return fmt.Errorf("url %q names no server", c.URL)
	case c.Senders < 0 || c.Senders > c.GroupSize:
		return fmt.Errorf("senders must be between 0 (every member) and the group size (%d), got %d", c.GroupSize, c.Senders)
	case c.Window < 0 || c.Window > 1000:
		return fmt.Errorf("window must be between 1 and 1000 sends, got %d", c.Window)
	case c.IndexFault != "" && c.IndexFault != "flush" && c.IndexFault != "restart" && c.IndexFault != "stale":
		return fmt.Errorf(`index fault must be "", flush, restart or stale, got %q`, c.IndexFault)
	case c.IndexFault != "" && c.URL != "":
		return errors.New("an index fault needs a run that starts its servers (no --url)")
	case c.IndexFault == "flush" && !isRedisIndex(c.Server.Index, c.Server.IndexSentinelAddrs):
		return errors.New("--index-fault flush needs --index redis://... (the in-process index has nothing to flush)")
	case c.IndexFaultAt < 0 || c.IndexFaultEvery < 0 || c.IndexFaultLag < 0:
		return errors.New("index fault times must be >= 0")
	case c.TypingMembers != 0 && (c.TypingMembers < 2 || c.TypingMembers > 1000):
		return fmt.Errorf("typing members must be 0 (none) or 2 to 1000 (one group), got %d", c.TypingMembers)
	case c.TypingInterval < 0:
		return fmt.Errorf("typing interval must be >= 0, got %v", c.TypingInterval)
	}
	if c.TypingInterval == 0 {
		c.TypingInterval = protocol.TypingInterval
	}
	if c.Window == 0 {
		c.Window = 1
	}
	if c.IndexFault != "" && c.IndexFaultAt == 0 {
		c.IndexFaultAt = c.Duration / 3
	}
	if c.IndexFaultLag == 0 {
		c.IndexFaultLag = 2 * time.Second
	}
	if c.Replicas > 1 {
		switch {
		case c.URL != "":
			return fmt.Errorf("--replicas %d starts servers; with --url, list the running fleet's URLs instead (comma-separated)", c.Replicas)
		case c.InProcess:
			return fmt.Errorf("--replicas %d needs child processes: drop --in-process", c.Replicas)
		case !strings.HasPrefix(c.Server.Store, "postgres://") && !strings.HasPrefix(c.Server.Store, "postgresql://"),
			!isRedisIndex(c.Server.Index, c.Server.IndexSentinelAddrs):
			return fmt.Errorf("--replicas %d needs --store postgres://... and --index redis://... (the processes share one store and one index; got --store %q, --index %q)",
				c.Replicas, orDefault(config.RedactURL(c.Server.Store), "SQLite, the embedded default"), orDefault(config.RedactURL(c.Server.Index), "in process, the default"))
		}
	}
	if c.SlowAckDelay == 0 {
		c.SlowAckDelay = 2 * time.Second
	}
	if c.Drain <= 0 {
		c.Drain = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

// Report is the outcome of a run. Counts are messages unless named pairs
// (a message times one of its recipients).
type Report struct {
	Clients, GroupSize int
	TargetRate         float64
	Duration           time.Duration
	Sent               int64            // send calls made
	Accepted           int64            // answered accepted
	SendErrors         map[string]int64 // sends that ended in an error, by code ("gave-up": unanswered at the deadline)
	SendsRetried       int64            // send frames written again with the same correlationId: answered overloaded or a limit (retried, so in no SendErrors), or replayed after a reconnect
	AchievedRate       float64          // accepted per second of the send phase
	Expected           int64            // pairs: accepted x (group size - 1)
	Received           int64            // pairs the recipients' clients reported (live or their own history syncs)
	RecoveredAtEnd     int64            // pairs missing at the end but found in the recipient's history
	Lost               int64            // pairs in neither: must be 0
	Frames             int64            // message frames received, duplicates included
	DeliveriesPerAcc   float64          // Frames / Expected
	Duplicates         int64            // frames dropped by the clients as already seen
	Reconnects         int64
	LatencyP50         time.Duration // send call to first report at the recipient
	LatencyP99         time.Duration
	LatencyP999        time.Duration
	LatencyMax         time.Duration
	// Same- and cross-process delivery latency (sender's and recipient's
	// processes equal or not), with their sample counts; only with
	// several processes.
	SameProcessDeliveries  int64
	CrossProcessDeliveries int64
	LatencySameP50         time.Duration
	LatencySameP99         time.Duration
	LatencyCrossP50        time.Duration
	LatencyCrossP99        time.Duration
	OutboxPeak             int64          // -1 when unknown
	OutboxFinal            int64          // -1 when unknown
	ServerPeakRSS          int64          // bytes; 0 when unknown; with several processes the sum of their peaks
	ServerCPUSeconds       float64        // with several processes their sum
	Replicas               int            // server processes driven
	Processes              []ProcessStats // per process, with several
	Withdrawals            map[string]int64
	StuckClients           int     // clients that never acked (Config.StuckShare)
	SlowClients            int     // clients that acked late (Config.SlowShare)
	StuckResynced          int64   // pairs of stuck recipients found only by their final history resync
	HealthyPerAcc          float64 // DeliveriesPerAcc over the recipients that are not stuck
	// HealthyReconnects counts the reconnects of clients that are neither
	// stuck nor slow: each is a withdrawal (or a lost socket) of a client
	// that acknowledged every frame at once. It should be 0.
	HealthyReconnects int64
	Senders, Window   int
	IndexFault        string
	IndexFaults       int              // faults that hit the index
	Rebuilds          map[string]int64 // the servers' index rebuilds, by reason
	Deferred          int64            // sends that waited behind a full push window
	Redeliveries      int64            // frames the servers re-sent after a lease expired
	FromHistory       int64            // messages the clients first found by a history sync (reconnects, the first sync)
	// The typing group (Config.TypingMembers): its size, the typing frames
	// its clients sent and the ones they received (each forwarded frame
	// reaches the other members).
	TypingMembers  int
	TypingSent     int64
	TypingReceived int64
	// The load generator's own CPU (getrusage: every thread of this
	// process): over the window from the start of sending to the end of
	// the drain (LoadgenWindow long), split into user and system time, and
	// over the whole run (connecting, sending, draining, reconciling,
	// closing). 0 when unknown. With InProcess it includes the server's.
	LoadgenCPUWindow     time.Duration
	LoadgenCPUWindowUser time.Duration
	LoadgenCPUWindowSys  time.Duration
	LoadgenWindow        time.Duration
	LoadgenCPUTotal      time.Duration
	InProcess            bool // the server ran in the load generator's process
}

// Problems lists what makes the run a failure: pairs lost, or not one
// message frame received live although messages were accepted for
// recipients that were not stuck (everything then came from history: live
// delivery is broken even though nothing was lost).
func (r *Report) Problems() []string {
	var out []string
	if r.Lost > 0 {
		out = append(out, fmt.Sprintf("%d lost", r.Lost))
	}
	if r.Expected > 0 && r.Frames == 0 && r.StuckClients < r.Clients {
		out = append(out, "no live deliveries: every message was recovered from history")
	}
	return out
}

// OK reports whether the run has no Problems.
func (r *Report) OK() bool { return len(r.Problems()) == 0 }

// String renders the report as aligned lines.
func (r *Report) String() string {
	var b strings.Builder
	p := func(k string, v any) { fmt.Fprintf(&b, "%-24s %v\n", k, v) }
	p("clients", fmt.Sprintf("%d (group size %d)", r.Clients, r.GroupSize))
	p("target rate", fmt.Sprintf("%.0f msg/s for %v", r.TargetRate, r.Duration))
	p("sent", r.Sent)
	p("accepted", fmt.Sprintf("%d (%.0f msg/s)", r.Accepted, r.AchievedRate))
	if len(r.SendErrors) > 0 {
		p("send errors", r.SendErrors)
	}
	p("sends retried", fmt.Sprintf("%d (answered overloaded or a limit, or replayed after a reconnect)", r.SendsRetried))
	p("expected deliveries", r.Expected)
	p("received", r.Received)
	p("recovered at end", r.RecoveredAtEnd)
	p("lost", r.Lost)
	p("frames", r.Frames)
	p("deliveries/accepted", fmt.Sprintf("%.3f", r.DeliveriesPerAcc))
	p("duplicates", r.Duplicates)
	p("found by history syncs", r.FromHistory)
	p("reconnects", fmt.Sprintf("%d (of clients that acknowledge at once: %d)", r.Reconnects, r.HealthyReconnects))
	if r.Window > 1 || (r.Senders > 0 && r.Senders < r.GroupSize) {
		p("senders / window", fmt.Sprintf("%d per chat / %d sends pipelined", r.Senders, r.Window))
	}
	if r.IndexFault != "" {
		p("index faults", fmt.Sprintf("%d x %s; rebuilds %v", r.IndexFaults, r.IndexFault, r.Rebuilds))
	}
	if r.Deferred > 0 {
		p("window deferred sends", r.Deferred)
	}
	if r.TypingMembers > 0 {
		p("typing", fmt.Sprintf("%d members: %d frames sent, %d received (%.0f/s)", r.TypingMembers, r.TypingSent, r.TypingReceived,
			float64(r.TypingReceived)/r.Duration.Seconds()))
	}
	p("server re-deliveries", r.Redeliveries)
	p("latency p50/p99/p99.9", fmt.Sprintf("%v / %v / %v", r.LatencyP50.Round(time.Microsecond*100), r.LatencyP99.Round(time.Microsecond*100), r.LatencyP999.Round(time.Microsecond*100)))
	p("latency max", r.LatencyMax.Round(time.Millisecond))
	if r.Replicas > 1 {
		rd := func(d time.Duration) time.Duration { return d.Round(time.Microsecond * 100) }
		p("same-process p50/p99", fmt.Sprintf("%v / %v (%d deliveries)", rd(r.LatencySameP50), rd(r.LatencySameP99), r.SameProcessDeliveries))
		p("cross-process p50/p99", fmt.Sprintf("%v / %v (%d deliveries)", rd(r.LatencyCrossP50), rd(r.LatencyCrossP99), r.CrossProcessDeliveries))
	}
	if r.OutboxPeak >= 0 {
		p("outbox peak / final", fmt.Sprintf("%d / %d", r.OutboxPeak, r.OutboxFinal))
	}
	if len(r.Withdrawals) > 0 {
		p("withdrawals", r.Withdrawals)
	}
	if r.StuckClients > 0 || r.SlowClients > 0 {
		p("stuck / slow clients", fmt.Sprintf("%d / %d", r.StuckClients, r.SlowClients))
		p("stuck resynced at end", r.StuckResynced)
		p("healthy deliv./acc.", fmt.Sprintf("%.3f", r.HealthyPerAcc))
	}
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	switch {
	case len(r.Processes) > 1:
		p("server processes", len(r.Processes))
		var maxRSS int64
		var maxCPU float64
		for i, ps := range r.Processes {
			line := fmt.Sprintf("%s: %d clients", ps.URL, ps.Clients)
			if ps.PeakRSS > 0 {
				line += fmt.Sprintf(", peak RSS %s, CPU %.1f s", mib(ps.PeakRSS), ps.CPUSeconds)
			}
			p(fmt.Sprintf("  process %d", i), line)
			maxRSS, maxCPU = max(maxRSS, ps.PeakRSS), max(maxCPU, ps.CPUSeconds)
		}
		if r.ServerPeakRSS > 0 {
			p("peak RSS sum / max", fmt.Sprintf("%s / %s", mib(r.ServerPeakRSS), mib(maxRSS)))
			p("server CPU sum / max", fmt.Sprintf("%.1f s / %.1f s", r.ServerCPUSeconds, maxCPU))
		}
	case r.ServerPeakRSS > 0:
		p("server peak RSS", mib(r.ServerPeakRSS))
		p("server CPU", fmt.Sprintf("%.1f s", r.ServerCPUSeconds))
	}
	if line := r.loadgenCPULine(); line != "" {
		p("loadgen CPU", line)
	}
	verdict := "OK: 0 lost"
	if !r.OK() {
		verdict = "FAIL: " + strings.Join(r.Problems(), "; ")
	}
	p("verdict", verdict)
	return b.String()
}

type memberKind int

const (
	normalClient memberKind = iota
	slowClient
	stuckClient
)

type member struct {
	idx  int
	home int // target index: idx % targets
	kind memberKind
	user string
	c    *client.Client
	chat string
	pos  int // position in its chat's members (r.chats[chat])
}

type run struct {
	cfg     Config
	runID   string
	target  *fleet
	homes   []*homeTransport // per target, with several targets
	members []*member
	chats   map[string][]int // chat -> member indexes
	typists *typists         // the typing group (Config.TypingMembers), nil without

	ledger *ledger // accepted sends and deliveries, by message

	latMu    sync.Mutex
	lat      []time.Duration
	latSame  []time.Duration // with several targets
	latCross []time.Duration

	sent      atomic.Int64
	own       *ownRedis    // the run's own Redis, for the restart and stale faults
	faults    atomic.Int64 // index faults done
	errMu     sync.Mutex
	errs      map[string]int64
	outboxMax atomic.Int64
}

// Run performs one load run and returns its report. The error is about the
// run itself (the server would not start, clients could not connect); a run
// that lost messages returns a report with Lost > 0 and no error.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	cpu := startCPU()
	r := &run{cfg: cfg, runID: randomSecret()[:8], ledger: newLedger(int(cfg.Rate * cfg.Duration.Seconds())), errs: map[string]int64{}, chats: map[string][]int{}}
	r.outboxMax.Store(-1)
	if f := cfg.IndexFault; f == "restart" || f == "stale" {
		own, err := startOwnRedis(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("loadgen: %w", err)
		}
		defer own.stop()
		r.own = own
		cfg.Server.Index = own.url()
		r.cfg = cfg
	}
	t, err := startTargets(ctx, cfg, r.runID)
	if err != nil {
		return nil, err
	}
	r.target = t
	defer t.stop()
	err = r.connect(ctx)
	if err == nil {
		r.typists, err = r.connectTypists(ctx)
	}
	if err != nil {
		r.closeClients()
		return nil, err
	}
	if cfg.connected != nil {
		cfg.connected(t)
	}
	rep := r.drive(ctx)
	r.closeClients()
	if c, ok := cpu.since(); ok {
		rep.LoadgenCPUTotal = c.total()
	}
	rep.InProcess = cfg.InProcess
	if err := ctx.Err(); err != nil {
		// Interrupted: the reconciliation could not finish (its history
		// reads were cancelled), so there is no report to trust.
		return nil, fmt.Errorf("loadgen: interrupted: %w", err)
	}
	t.finish(rep, r.clientsPerTarget())
	return rep, nil
}

func isRedisIndex(idx string, sentinels []string) bool {
	return strings.HasPrefix(idx, "redis://") || strings.HasPrefix(idx, "rediss://") || (idx == "sentinel" && len(sentinels) > 0)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func randomSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (r *run) connect(ctx context.Context) error {
	n := r.cfg.Clients
	signer := r.target.signer()
	nt := len(r.target.targets)
	var bases []string
	for _, t := range r.target.targets {
		bases = append(bases, t.url())
	}
	// With several targets each home target gets its own HTTP client,
	// whose dials fail over to the next target when the home one refuses.
	var hcs []*http.Client
	if nt > 1 {
		for i := range nt {
			hc, ht, err := newHomeClient(bases, i)
			if err != nil {
				return err
			}
			hcs, r.homes = append(hcs, hc), append(r.homes, ht)
		}
	}
	r.members = make([]*member, n)
	for i := 0; i < n; i++ {
		// Round-robin: client i on target i % nt. Chats are runs of
		// consecutive clients, so with nt > 1 the two members of a pair
		// are always on different targets (i and i+1 differ mod nt).
		m := &member{idx: i, home: i % nt, kind: kindOf(i, r.cfg.StuckShare, r.cfg.SlowShare),
			user: fmt.Sprintf("lg%s-%05d", r.runID, i)}
		tok, err := signer.Issue(m.user, 0)
		if err != nil {
			return err
		}
		var hc *http.Client
		if hcs != nil {
			hc = hcs[m.home]
		}
		m.c, err = client.New(client.Config{
			URL: bases[m.home], Token: tok, HTTPClient: hc,
			OnMessage:  func(msg protocol.Message) { r.onMessage(m, msg) },
			BackoffMin: 50 * time.Millisecond, BackoffMax: 2 * time.Second,
			ManualAck: m.kind != normalClient,
		})
		if err != nil {
			return err
		}
		r.members[i] = m
		go func() { _ = m.c.Run(ctx) }()
	}
	// Chats: consecutive clients share one.
	g := r.cfg.GroupSize
	for start := 0; start+1 < n; start += g {
		end := min(start+g, n)
		if end-start < 2 {
			break
		}
		owner := r.members[start]
		var chatID string
		if g == 2 {
			chat, err := retrySetup(ctx, func() (client.Chat, error) { return owner.c.CreateDirect(ctx, r.members[start+1].user) })
			if err != nil {
				return fmt.Errorf("loadgen: create chat: %w", err)
			}
			chatID = chat.ChatID
		} else {
			var users []string
			for i := start + 1; i < end; i++ {
				users = append(users, r.members[i].user)
			}
			// A group whose 503 came after its commit is left unused.
			chat, err := retrySetup(ctx, func() (client.Chat, error) {
				return owner.c.CreateGroup(ctx, fmt.Sprintf("load group %d", start/g), users)
			})
			if err != nil {
				return fmt.Errorf("loadgen: create group: %w", err)
			}
			chatID = chat.ChatID
		}
		for i := start; i < end; i++ {
			r.members[i].chat, r.members[i].pos = chatID, len(r.chats[chatID])
			r.chats[chatID] = append(r.chats[chatID], i)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, m := range r.members {
		if err := m.c.WaitConnected(wctx); err != nil {
			return fmt.Errorf("loadgen: client %s did not connect: %w", m.user, err)
		}
	}
	return nil
}

// kindOf spreads the stuck and slow clients evenly over the indexes: client
// i is stuck when the running count of stuck clients, share x index, steps
// up at i (likewise slow, over the shares summed).
func kindOf(i int, stuck, slow float64) memberKind {
	step := func(share float64) bool {
		return share > 0 && int(float64(i+1)*share) > int(float64(i)*share)
	}
	switch {
	case step(stuck):
		return stuckClient
	case step(stuck + slow):
		return slowClient
	}
	return normalClient
}

func (r *run) onMessage(m *member, msg protocol.Message) {
	if m.kind == slowClient {
		id := msg.MessageID
		time.AfterFunc(r.cfg.SlowAckDelay, func() { _ = m.c.Ack(id) })
	}
	r.ledger.report(msg.MessageID, msg.ChatID, m)
	if i := strings.IndexByte(msg.Body, '|'); i > 0 {
		if ns, err := strconv.ParseInt(msg.Body[:i], 10, 64); err == nil {
			d := time.Duration(time.Now().UnixNano() - ns)
			same, known := r.sameProcess(msg.SenderID, m)
			r.latMu.Lock()
			r.lat = append(r.lat, d)
			if known && same {
				r.latSame = append(r.latSame, d)
			} else if known {
				r.latCross = append(r.latCross, d)
			}
			r.latMu.Unlock()
		}
	}
}

// sameProcess reports whether the sender (a user id of this run) and the
// recipient m are connected to the same target now; known is false with a
// single target or a sender not of this run.
func (r *run) sameProcess(sender string, m *member) (same, known bool) {
	if r.homes == nil {
		return false, false
	}
	rest, ok := strings.CutPrefix(sender, "lg"+r.runID+"-")
	if !ok {
		return false, false
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 0 || i >= len(r.members) {
		return false, false
	}
	from := r.homes[i%len(r.homes)].cur.Load()
	return from == r.homes[m.home].cur.Load(), true
}

// clientsPerTarget counts the clients by the target their last connection
// reached.
func (r *run) clientsPerTarget() []int {
	out := make([]int, len(r.target.targets))
	for _, m := range r.members {
		if m == nil {
			continue
		}
		t := m.home
		if r.homes != nil {
			t = int(r.homes[m.home].cur.Load())
		}
		out[t]++
	}
	return out
}

func (r *run) closeClients() {
	r.typists.close()
	var wg sync.WaitGroup
	for _, m := range r.members {
		if m != nil && m.c != nil {
			wg.Add(1)
			go func() { defer wg.Done(); _ = m.c.Close() }()
		}
	}
	wg.Wait()
}

func (r *run) drive(ctx context.Context) *Report {
	cfg := r.cfg
	start := time.Now()
	cpu := startCPU()
	stopProfile := r.startProfile()
	defer stopProfile()
	sendCtx, stopSending := context.WithTimeout(ctx, cfg.Duration)
	defer stopSending()
	var senders sync.WaitGroup
	var inflight sync.WaitGroup
	pad := strings.Repeat("x", cfg.BodyBytes)
	// Each sender sends cfg.Window messages per interval, so the senders
	// together send cfg.Rate per second.
	nSenders := 0
	for _, m := range r.members {
		if r.sends(m) {
			nSenders++
		}
	}
	interval := time.Duration(float64(time.Second) * float64(nSenders*cfg.Window) / cfg.Rate)
	deadlines := &sendDeadlines{parent: ctx, after: cfg.Duration + cfg.Drain}
	defer deadlines.stop()
	if faults := r.startFaults(sendCtx); faults != nil {
		defer faults()
	}
	r.typists.run(sendCtx, cfg.TypingInterval, &senders)
	for _, m := range r.members {
		if !r.sends(m) {
			continue
		}
		senders.Add(1)
		go func() {
			defer senders.Done()
			// Spread the clients' phases over one interval.
			offset := time.Duration(int64(interval) * int64(m.idx) / int64(cfg.Clients))
			select {
			case <-sendCtx.Done():
				return
			case <-time.After(offset):
			}
			tick := time.NewTicker(interval)
			defer tick.Stop()
			w := startSendWorker(func(corr string) { r.sendOne(deadlines, m, corr, pad) })
			defer w.stop()
			seq := 0
			for {
				// A burst of cfg.Window sends, all in flight at once; the
				// next burst waits for every answer of this one.
				var burst sync.WaitGroup
				for range cfg.Window {
					seq++
					corr := m.user + "-" + strconv.Itoa(seq)
					inflight.Add(1)
					burst.Add(1)
					r.sent.Add(1)
					w.send(corr, func() {
						inflight.Done()
						burst.Done()
					})
				}
				if cfg.Window > 1 {
					burst.Wait()
				}
				select {
				case <-sendCtx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	progressDone := make(chan struct{})
	go r.progress(ctx, start, progressDone)
	senders.Wait()
	sendPhase := time.Since(start)
	inflight.Wait()

	// Drain: wait until every expected pair was reported, then for the
	// outbox to empty.
	deadline := time.Now().Add(cfg.Drain)
	pending := r.missingPairs() // every sendOne returned: acc is complete
	for time.Now().Before(deadline) && ctx.Err() == nil && len(pending) > 0 {
		time.Sleep(100 * time.Millisecond)
		pending = r.stillMissing(pending)
	}
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if d := r.target.outboxDepth(ctx); d <= 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	close(progressDone)
	window := time.Since(start)
	windowCPU, cpuOK := cpu.since()
	stopProfile()
	resynced := r.resyncStuck(ctx)
	rep := r.report(ctx, sendPhase)
	if cpuOK {
		rep.LoadgenCPUWindow, rep.LoadgenCPUWindowUser, rep.LoadgenCPUWindowSys = windowCPU.total(), windowCPU.User, windowCPU.Sys
		rep.LoadgenWindow = window
	}
	rep.StuckResynced = resynced
	if ty := r.typists; ty != nil {
		rep.TypingMembers, rep.TypingSent, rep.TypingReceived = len(ty.clients), ty.sent.Load(), ty.received.Load()
	}
	return rep
}

// sendOne sends one message for m with correlationId corr and records the
// outcome. The client retries the send (same correlationId) until it is
// accepted or the run's deadline passes.
func (r *run) sendOne(deadlines *sendDeadlines, m *member, corr, pad string) {
	now := time.Now()
	var tmp [20]byte
	ts := strconv.AppendInt(tmp[:0], now.UnixNano(), 10)
	var b strings.Builder
	b.Grow(r.cfg.BodyBytes)
	b.Write(ts)
	b.WriteByte('|')
	b.WriteString(pad[:r.cfg.BodyBytes-len(ts)-1])
	acc, err := m.c.SendWithID(deadlines.at(now), m.chat, corr, b.String())
	if err != nil {
		code := client.CodeOf(err)
		if code == "" {
			code = "gave-up" // still unanswered when the run's deadline passed
		}
		r.errMu.Lock()
		r.errs[code]++
		r.errMu.Unlock()
		return
	}
	r.ledger.accept(acc.MessageID, m.chat, m.idx)
}

// sends reports whether m is one of its chat's senders (Config.Senders).
func (r *run) sends(m *member) bool {
	if m.chat == "" {
		return false
	}
	if r.cfg.Senders == 0 {
		return true
	}
	return slices.Index(r.chats[m.chat], m.idx) < r.cfg.Senders
}

// sendersPerChat is the number of members of each chat that send.
func (r *run) sendersPerChat() int {
	if r.cfg.Senders == 0 {
		return r.cfg.GroupSize
	}
	return r.cfg.Senders
}

// resyncStuck makes every stuck client do its final resync: it reads its
// chat's whole history (as a client reopened after the run would) and
// reports what it had not seen. It returns the pairs found that way.
func (r *run) resyncStuck(ctx context.Context) int64 {
	var n int64
	for _, m := range r.members {
		if m.kind != stuckClient || m.chat == "" {
			continue
		}
		for id := range r.history(ctx, m) {
			if a, ok := r.ledger.acceptedMsg(id); !ok || a.sender == m.idx || a.chat != m.chat {
				continue // its own send, or one never answered accepted
			}
			if r.ledger.report(id, m.chat, m) {
				n++
			}
		}
	}
	return n
}

// pair is an expected (message, recipient) pair of the reconciliation.
type pair struct {
	id string
	m  *member
}

// missingPairs lists the expected pairs not reported yet, leaving out the
// stuck recipients (they are resynced at the end). The drain computes it
// once and then re-checks only what it returned (stillMissing): polling
// every pair each time cost O(accepted x group size) every 100 ms.
func (r *run) missingPairs() []pair {
	var out []pair
	for _, a := range r.ledger.acceptedMsgs() {
		for _, i := range r.chats[a.chat] {
			if i == a.sender {
				continue
			}
			m := r.members[i]
			if m.kind == stuckClient {
				continue
			}
			if !r.ledger.has(a.id, m) {
				out = append(out, pair{id: a.id, m: m})
			}
		}
	}
	return out
}

// stillMissing keeps the pairs of ps not reported yet (reusing ps).
func (r *run) stillMissing(ps []pair) []pair {
	out := ps[:0]
	for _, p := range ps {
		if !r.ledger.has(p.id, p.m) {
			out = append(out, p)
		}
	}
	return out
}

func (r *run) progress(ctx context.Context, start time.Time, done chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		depth := r.target.outboxDepth(ctx)
		if depth > r.outboxMax.Load() {
			r.outboxMax.Store(depth)
		}
		if r.cfg.Progress == nil {
			continue
		}
		var frames, reconnects int64
		for _, m := range r.members {
			st := m.c.Stats()
			frames += st.MessageFrames
			reconnects += st.Reconnects
		}
		acc := r.ledger.accepted.Load()
		fmt.Fprintf(r.cfg.Progress, "t=%3.0fs sent=%d accepted=%d frames=%d outbox=%d reconnects=%d\n",
			time.Since(start).Seconds(), r.sent.Load(), acc, frames, depth, reconnects)
	}
}

func (r *run) report(ctx context.Context, sendPhase time.Duration) *Report {
	cfg := r.cfg
	rep := &Report{Clients: cfg.Clients, GroupSize: cfg.GroupSize, TargetRate: cfg.Rate, Duration: cfg.Duration,
		Sent: r.sent.Load(), SendErrors: map[string]int64{}, OutboxPeak: r.outboxMax.Load()}
	r.errMu.Lock()
	for k, v := range r.errs {
		rep.SendErrors[k] = v
	}
	r.errMu.Unlock()
	acc := r.ledger.acceptedMsgs()
	rep.Accepted = int64(len(acc))
	rep.AchievedRate = float64(rep.Accepted) / sendPhase.Seconds()
	missingBy := map[int][]string{}
	for _, a := range acc {
		for _, i := range r.chats[a.chat] {
			if i == a.sender {
				continue
			}
			rep.Expected++
			if r.ledger.has(a.id, r.members[i]) {
				rep.Received++
			} else {
				missingBy[i] = append(missingBy[i], a.id)
			}
		}
	}
	// Anything still missing must be in the recipient's history (G3).
	for i, ids := range missingBy {
		inHistory := r.history(ctx, r.members[i])
		for _, id := range ids {
			if inHistory[id] {
				rep.RecoveredAtEnd++
			} else {
				rep.Lost++
			}
		}
	}
	var healthyFrames, healthyExpected int64
	for _, m := range r.members {
		st := m.c.Stats()
		rep.Frames += st.MessageFrames
		rep.Duplicates += st.DuplicateFrames
		rep.Reconnects += st.Reconnects
		rep.SendsRetried += st.SendsRetried
		rep.FromHistory += st.FromHistory
		switch m.kind {
		case stuckClient:
			rep.StuckClients++
		case slowClient:
			rep.SlowClients++
		}
		if m.kind != stuckClient {
			healthyFrames += st.MessageFrames
		}
		if m.kind == normalClient {
			rep.HealthyReconnects += st.Reconnects
		}
	}
	for _, a := range acc {
		for _, i := range r.chats[a.chat] {
			if i != a.sender && r.members[i].kind != stuckClient {
				healthyExpected++
			}
		}
	}
	if rep.Expected > 0 {
		rep.DeliveriesPerAcc = float64(rep.Frames) / float64(rep.Expected)
	}
	if healthyExpected > 0 {
		rep.HealthyPerAcc = float64(healthyFrames) / float64(healthyExpected)
	}
	r.latMu.Lock()
	lat := r.lat
	r.latMu.Unlock()
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	q := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	rep.LatencyP50, rep.LatencyP99, rep.LatencyP999 = q(0.50), q(0.99), q(0.999)
	if len(lat) > 0 {
		rep.LatencyMax = lat[len(lat)-1]
	}
	if r.homes != nil {
		r.latMu.Lock()
		same, cross := append([]time.Duration(nil), r.latSame...), append([]time.Duration(nil), r.latCross...)
		r.latMu.Unlock()
		rep.SameProcessDeliveries, rep.CrossProcessDeliveries = int64(len(same)), int64(len(cross))
		rep.LatencySameP50, rep.LatencySameP99 = quantile(same, 0.50), quantile(same, 0.99)
		rep.LatencyCrossP50, rep.LatencyCrossP99 = quantile(cross, 0.50), quantile(cross, 0.99)
	}
	rep.OutboxFinal = r.target.outboxDepth(ctx)
	rep.Withdrawals, rep.Rebuilds, rep.Deferred, rep.Redeliveries = r.target.deliveryTotals(ctx)
	rep.Senders, rep.Window, rep.IndexFault = r.sendersPerChat(), cfg.Window, cfg.IndexFault
	rep.IndexFaults = int(r.faults.Load())
	return rep
}

// quantile sorts lat and returns its p quantile, 0 when empty.
func quantile(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	return lat[min(len(lat)-1, int(p*float64(len(lat))))]
}

// history pages every message of m's chat.
func (r *run) history(ctx context.Context, m *member) map[string]bool {
	out := map[string]bool{}
	since := ""
	for {
		msgs, more, err := m.c.History(ctx, m.chat, since, 500)
		if err != nil {
			r.cfg.Logger.Warn("history read failed during reconciliation", "user", m.user, "err", err)
			return out
		}
		for _, msg := range msgs {
			out[msg.MessageID] = true
			since = msg.MessageID
		}
		if !more || len(msgs) == 0 {
			return out
		}
	}
}

// target is the server under load.
type target interface {
	url() string
	signer() *auth.Signer
	outboxDepth(ctx context.Context) int64
	adminStats(ctx context.Context) (server.AdminStats, bool)
	finish(*Report)
	stop()
}

// remote reaches a server over HTTP (a child process or --url).
type remote struct {
	base  string
	sign  *auth.Signer
	admin string
	hc    *http.Client
}

func newRemote(base, secret string) (*remote, error) {
	s, err := auth.NewSigner([]byte(secret))
	if err != nil {
		return nil, err
	}
	admin, err := s.IssueAdmin(0)
	if err != nil {
		return nil, err
	}
	return &remote{base: strings.TrimRight(base, "/"), sign: s, admin: admin, hc: &http.Client{Timeout: 5 * time.Second}}, nil
}

func (t *remote) url() string          { return t.base }
func (t *remote) signer() *auth.Signer { return t.sign }
func (t *remote) finish(*Report)       {}
func (t *remote) stop()                {}

func (t *remote) adminStats(ctx context.Context) (server.AdminStats, bool) {
	var st server.AdminStats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.base+"/admin/stats", nil)
	if err != nil {
		return st, false
	}
	req.Header.Set("Authorization", "Bearer "+t.admin)
	resp, err := t.hc.Do(req)
	if err != nil {
		return st, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return st, false
	}
	return st, true
}

func (t *remote) outboxDepth(ctx context.Context) int64 {
	st, ok := t.adminStats(ctx)
	if !ok {
		return -1
	}
	return st.OutboxDepth
}

// local is a server started in this process.
type local struct {
	srv *server.Server
}

func (t *local) url() string          { return t.srv.URL() }
func (t *local) signer() *auth.Signer { return t.srv.Signer() }
func (t *local) finish(*Report)       {}
func (t *local) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_ = t.srv.Shutdown(ctx)
}
func (t *local) adminStats(ctx context.Context) (server.AdminStats, bool) {
	st, err := t.srv.Stats(ctx)
	return st, err == nil
}
func (t *local) outboxDepth(ctx context.Context) int64 {
	st, ok := t.adminStats(ctx)
	if !ok {
		return -1
	}
	return st.OutboxDepth
}

// setupTries is how many times retrySetup calls a setup request.
const setupTries = 5

// retrySetup calls f, a request of the run's setup, up to setupTries
// times while the server answers it 503 unavailable or 429 rate_limited
// (a store that failed over, a session ended under the request), waiting
// 100 ms, 200 ms, 400 ms and 800 ms between the calls: a single such
// answer no longer ends the run before it starts. Other errors, and the
// last one, are returned.
func retrySetup[T any](ctx context.Context, f func() (T, error)) (T, error) {
	wait := 100 * time.Millisecond
	for try := 1; ; try++ {
		v, err := f()
		var ce *client.Error
		if err == nil || try == setupTries || !errors.As(err, &ce) ||
			(ce.Code != protocol.CodeUnavailable && ce.Code != protocol.CodeRateLimited) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(wait):
		}
		wait *= 2
	}
}
