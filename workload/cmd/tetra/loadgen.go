package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tetra-messenger/tetra/workload/loadgen"
	"github.com/tetra-messenger/tetra/workload/protocol"
)

func loadgenCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "sweep" {
		return sweepCmd(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := loadgen.DefaultConfig()
	fs.Usage = usageWithEnv(fs, "tetra loadgen [flags]   (the server knobs apply to the server the run starts)\n       tetra loadgen sweep [flags]   (a table of configurations; see tetra loadgen sweep --help)")
	build := serverFlags(fs, false) // the knobs of the server the run starts
	url := fs.String("url", "", "target a running server instead of starting one, or a comma-separated list of the base URLs\n"+
		"of a running fleet sharing one store and index (needs TETRA_JWT_SECRET, the same for all)")
	replicas := fs.Int("replicas", 1, "server processes to start, sharing --store and --index (> 1 needs --store postgres://... and\n"+
		"--index redis://...); each gets its own --index-owner and the run's --index-prefix, clients are spread round-robin")
	clients := fs.Int("clients", def.Clients, "WebSocket clients (one user each)")
	group := fs.Int("group-size", def.GroupSize, "members per chat: 2 = pairs in direct chats, more = group chats")
	rate := fs.Float64("rate", def.Rate, "total messages per second")
	duration := fs.Duration("duration", def.Duration, "length of the send phase")
	drain := fs.Duration("drain", def.Drain, "longest wait after sending for deliveries and the outbox to drain")
	body := fs.Int("body-bytes", def.BodyBytes, "bytes per message body (>= 24)")
	stuck := fs.Float64("stuck-share", 0, "share of clients (0..1) that never ack: withdrawn by the server, resynced from history at the end")
	slow := fs.Float64("slow-share", 0, "share of clients (0..1) that ack each message only after --slow-ack-delay")
	slowDelay := fs.Duration("slow-ack-delay", 2*time.Second, "ack delay of the slow clients")
	senders := fs.Int("senders", 0, "members of each chat that send (the others only receive); 0 = every member")
	window := fs.Int("window", 1, "sends each sender pipelines at once (a burst), the next burst once all are answered")
	fault := fs.String("index-fault", "", "hit the waterline index during the send phase: flush (delete the run's Redis keys),\n"+
		"restart (SIGKILL and restart empty a redis-server the run starts), stale (move to a replica that fell behind)")
	faultAt := fs.Duration("index-fault-at", 0, "when the first index fault hits (default a third of --duration)")
	faultEvery := fs.Duration("index-fault-every", 0, "repeat the index fault at this interval (0: once)")
	inProcess := fs.Bool("in-process", false, "run the server inside this process (no server RSS/CPU in the report)")
	typing := fs.Int("typing-members", 0, "add a group of this many clients (2..1000) that send typing frames during the send phase\n"+
		"(PROTOCOL.md §7.4), alongside the message load; 0 = none")
	typingEvery := fs.Duration("typing-interval", protocol.TypingInterval, "how often each typing member sends a typing frame (a client whose user keeps typing)")
	quiet := fs.Bool("quiet", false, "no progress lines")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile (runtime/pprof) of the load generator, from the start of sending\n"+
		"to the end of the drain, to this file (with --in-process the server's share is in it too)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := envDefaults(fs); err != nil {
		return err
	}
	scfg, err := build()
	if err != nil {
		return err
	}
	cfg := loadgen.Config{URL: *url, Secret: os.Getenv("TETRA_JWT_SECRET"), InProcess: *inProcess, Replicas: *replicas, Server: scfg,
		Clients: *clients, GroupSize: *group, Rate: *rate, Duration: *duration, Drain: *drain, BodyBytes: *body,
		StuckShare: *stuck, SlowShare: *slow, SlowAckDelay: *slowDelay,
		Senders: *senders, Window: *window, IndexFault: *fault, IndexFaultAt: *faultAt, IndexFaultEvery: *faultEvery,
		TypingMembers: *typing, TypingInterval: *typingEvery}
	if !*quiet {
		cfg.Progress = stderr
	}
	if !cfg.InProcess {
		loadgenGC()
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("loadgen: %w", err)
		}
		defer f.Close()
		cfg.CPUProfile = f
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	rep, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, rep.String())
	fmt.Fprintf(stdout, "%-24s %v\n", "wall time", time.Since(start).Round(time.Second))
	if !rep.OK() {
		return fmt.Errorf("loadgen: %s", strings.Join(rep.Problems(), "; "))
	}
	return nil
}

// sweepCmd runs a table of configurations, each against a fresh server, and
// writes sweep.md, sweep.json and PNG charts into --out.
func sweepCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadgen sweep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := loadgen.DefaultConfig()
	fs.Usage = usageWithEnv(fs, "tetra loadgen sweep [--table sweep.json] [--out results/] [flags]\n\n"+
		"Runs every row of the table in turn, each against a fresh server started with the\n"+
		"server flags below and then the row's knobs (reconnectGrace, maxPending, lease,\n"+
		"maxDeliveryAttempts, outboxRetention) and load (clients, rate, duration, groupSize,\n"+
		"stuckShare, slowShare). Without --table it runs the paper's table (--print-table shows it).\n"+
		"--clients, --rate and --duration, when given, override every row.")
	build := serverFlags(fs, false)
	table := fs.String("table", "", "JSON sweep table (default: the embedded paper's table)")
	out := fs.String("out", "results", "directory for sweep.md, sweep.json and the PNG charts")
	printTable := fs.Bool("print-table", false, "print the table that would run and exit")
	clients := fs.Int("clients", 0, "override every row's client count")
	rate := fs.Float64("rate", 0, "override every row's total msg/s")
	duration := fs.Duration("duration", 0, "override every row's send phase")
	drain := fs.Duration("drain", def.Drain, "longest wait after each row's send phase")
	stuck := fs.Float64("stuck-share", 0, "share of never-acking clients in every row (a row's stuckShare wins)")
	slow := fs.Float64("slow-share", 0, "share of late-acking clients in every row (a row's slowShare wins)")
	slowDelay := fs.Duration("slow-ack-delay", 2*time.Second, "ack delay of the slow clients")
	inProcess := fs.Bool("in-process", false, "run the servers inside this process (no server RSS/CPU)")
	replicas := fs.Int("replicas", 1, "server processes per row, sharing --store and --index (> 1 needs --store postgres://... and --index redis://...)")
	quiet := fs.Bool("quiet", false, "no progress lines")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := envDefaults(fs); err != nil {
		return err
	}
	scfg, err := build()
	if err != nil {
		return err
	}
	tab := loadgen.DefaultSweep()
	if *table != "" {
		b, err := os.ReadFile(*table)
		if err != nil {
			return err
		}
		if tab, err = loadgen.ParseSweep(b); err != nil {
			return err
		}
	}
	// Command-line load overrides every row.
	if *clients > 0 || *rate > 0 || *duration > 0 {
		for i := range tab.Rows {
			r := &tab.Rows[i]
			if *clients > 0 {
				r.Clients = *clients
			}
			if *rate > 0 {
				r.Rate = *rate
			}
			if *duration > 0 {
				r.Duration = loadgen.Duration(*duration)
			}
		}
	}
	base := def
	base.Server, base.InProcess, base.Drain, base.Replicas = scfg, *inProcess, *drain, *replicas
	if !base.InProcess {
		loadgenGC()
	}
	base.StuckShare, base.SlowShare, base.SlowAckDelay = *stuck, *slow, *slowDelay
	if *printTable {
		for i, r := range tab.Rows {
			c := tab.Apply(base, r)
			fmt.Fprintf(stdout, "%d. %s: %d clients, %.0f msg/s, %v; grace %v, pending %d, lease %v, attempts %d, stuck %.2f, slow %.2f\n",
				i+1, r.Name, c.Clients, c.Rate, c.Duration, c.Server.Tuning.ReconnectGrace, c.Server.Tuning.MaxPending,
				c.Server.Tuning.Lease, c.Server.Tuning.MaxDeliveryAttempts, c.StuckShare, c.SlowShare)
		}
		return nil
	}
	var progress io.Writer
	if !*quiet {
		progress = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	res, err := loadgen.Sweep(ctx, base, tab, *out, progress)
	if err != nil {
		return err
	}
	if err := loadgen.WriteMarkdown(stdout, res); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nwrote %s, sweep.json and the charts in %s (wall time %v)\n", filepath.Join(*out, "sweep.md"), *out, time.Since(start).Round(time.Second))
	var lost int64
	for _, r := range res {
		if r.Report != nil {
			lost += r.Report.Lost
		}
	}
	if lost > 0 {
		return fmt.Errorf("%d accepted deliveries lost across the sweep", lost)
	}
	return nil
}

// loadgenGCPercent is the load generator's GOGC unless the environment
// sets one. Its garbage is mostly per frame (decoded messages) while what
// it keeps grows through a run (every message's record, the clients'
// dedupe sets): at 4,000 msg/s in groups of 10 (3,000 clients), GOGC 400
// took its CPU per frame from 15.8 and 16.3 µs to 13.5 and 14.4 µs, CPU
// the server it measures shares, for a larger heap (peak RSS 474-485 ->
// 674-689 MB). The servers it starts are other processes and keep the
// default; with --in-process the run keeps the default too.
const loadgenGCPercent = 400

// loadgenGC sets the load generator's GOGC to loadgenGCPercent unless
// the environment chose (defaultGC).
func loadgenGC() { defaultGC(loadgenGCPercent) }
