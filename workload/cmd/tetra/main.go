package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tetra-messenger/tetra/workload/auth"
	"github.com/tetra-messenger/tetra/workload/ingest"
	"github.com/tetra-messenger/tetra/workload/nudge"
	"github.com/tetra-messenger/tetra/workload/server"
	redisidx "github.com/tetra-messenger/tetra/workload/waterline/redis"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: tetra <command> [flags]

commands:
  serve     run the messenger (default: SQLite in ./data, in-process index, :8080)
  token     print a token:  tetra token --user alice
  loadgen   drive load and reconcile every message

Run "tetra <command> -h" for the flags of a command.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(args[1:], stderr)
	case "token":
		err = token(args[1:], stdout, stderr)
	case "loadgen":
		err = loadgenCmd(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "tetra: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, errLogged) {
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "tetra %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// envDefaults sets every flag not given on the command line from its
// TETRA_* environment variable.
func envDefaults(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		env := envName(f.Name)
		if v, ok := os.LookupEnv(env); ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %v", env, v, err))
			}
		}
	})
	return errors.Join(errs...)
}

// usageWithEnv prints the flags of fs, each with its environment variable
// except the cliOnly ones, which have none.
func usageWithEnv(fs *flag.FlagSet, synopsis string, cliOnly ...string) func() {
	return func() {
		out := fs.Output()
		note := "Every flag"
		if len(cliOnly) > 0 {
			note = "Every flag shown with brackets"
		}
		fmt.Fprintf(out, "usage: %s\n\n%s can also be set by its environment variable (shown in brackets);\na flag on the command line wins.\n\n", synopsis, note)
		fs.VisitAll(func(f *flag.Flag) {
			name, usage := flag.UnquoteUsage(f)
			if slices.Contains(cliOnly, f.Name) {
				fmt.Fprintf(out, "  --%s\n    \t%s", strings.TrimSpace(f.Name+" "+name), usage)
			} else {
				fmt.Fprintf(out, "  --%s %s  [%s]\n    \t%s", f.Name, name, envName(f.Name), usage)
			}
			if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
				fmt.Fprintf(out, " (default %s)", f.DefValue)
			}
			fmt.Fprintln(out)
		})
	}
}

// envName is the environment variable of a flag: TETRA_ plus the name in
// upper case, except --data, whose variable is TETRA_DATA_DIR.
func envName(flagName string) string {
	if flagName == "data" {
		return "TETRA_DATA_DIR"
	}
	return "TETRA_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func newLogger(format, level string, w io.Writer) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %v", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format must be text or json, got %q", format)
}

// nudgeSecret reads the nudge webhook's secret: from file (trailing
// newlines trimmed) when given, else from TETRA_NUDGE_SECRET. A secret is
// never a plain flag: flags show in ps and in the pod spec.
func nudgeSecret(file string) ([]byte, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--nudge-secret-file: %w", err)
		}
		return []byte(strings.TrimRight(string(b), "\r\n")), nil
	}
	if v := os.Getenv("TETRA_NUDGE_SECRET"); v != "" {
		return []byte(v), nil
	}
	return nil, errors.New("--nudge-url needs a secret: set TETRA_NUDGE_SECRET or --nudge-secret-file")
}

// serverFlags registers the server's flags on fs and returns a function
// that builds the Config once fs is parsed.
func serverFlags(fs *flag.FlagSet, listen bool) func() (server.Config, error) {
	cfg := server.DefaultConfig()
	t := &cfg.Tuning
	if listen {
		fs.StringVar(&cfg.Addr, "addr", cfg.Addr, "listen address")
		fs.StringVar(&cfg.MetricsAddr, "metrics-addr", "", `serve /metrics on a listener of its own at this address (for example ":9090") and not on --addr; "" serves it on --addr`)
		fs.StringVar(&cfg.DataDir, "data", cfg.DataDir, "data directory (SQLite database, persisted token secret)")
	}
	fs.StringVar(&cfg.Store, "store", "", `history and outbox store: "" (SQLite in --data), sqlite:///path.db, or postgres://user:pass@host:5432/db`)
	fs.StringVar(&cfg.Outbox, "outbox", "", `outbox: "" (in the store) or kafka://host:port[,host:port]/topic (a Kafka topic fed from history by a relay; see docs/kafka.md)`)
	fs.StringVar(&cfg.Index, "index", "", `waterline index: "" or memory (in process), redis://host:6379/0, or sentinel`)
	fs.StringVar(&cfg.IndexPrefix, "index-prefix", "tetra:", "prefix of every Redis key")
	fs.StringVar(&cfg.IndexOwner, "index-owner", "", "this process's name in the Redis index, stable across its restarts (default: the hostname)")
	sentinels := fs.String("index-sentinel-addrs", "", "comma-separated Sentinel addresses (with --index sentinel)")
	fs.StringVar(&cfg.IndexSentinelMaster, "index-sentinel-master", "", "Sentinel master name (with --index sentinel)")
	fs.StringVar(&cfg.IndexSentinelMasterURL, "index-sentinel-master-url", "", "with --index sentinel: redis://[user:password@]host/db (or rediss://) whose credentials,\n"+
		"database and TLS apply to the master (the host only names the TLS server); prefer the env variable for a password")
	fs.StringVar(&cfg.TuningDir, "tuning-dir", "", "directory of tuning files (one per key, as a mounted ConfigMap), reloaded live")
	t.RegisterFlags(fs) // every tuning knob (config.Knobs)
	fs.IntVar(&cfg.Ingest.QueueSize, "inbound-queue", 8000, "inbound queue; beyond it sends are shed as overloaded")
	fs.IntVar(&cfg.Ingest.BatchSize, "commit-batch", ingest.DefaultBatchSize, "group commit: messages per transaction")
	fs.DurationVar(&cfg.Ingest.BatchWait, "commit-wait", ingest.DefaultBatchWait, "group commit: longest wait to fill a batch (skipped while sends arrive this far apart)")
	fs.IntVar(&cfg.Ingest.MaxBatch, "commit-max-batch", 8*ingest.DefaultBatchSize, "group commit: most messages per transaction when a backlog is already queued")
	fs.DurationVar(&cfg.StoreTimeout, "store-timeout", 5*time.Second, "longest a send waits for its commit, queue time included; then it is answered overloaded (and the store counts as failing for /readyz)")
	fs.IntVar(&cfg.Delivery.FastQueue, "fast-queue", 8000, "fast-path queue; when full, delivery falls back to the poller")
	fs.IntVar(&cfg.Delivery.Concurrency, "delivery-concurrency", 0, "fast-path delivery workers (0: 32 with a Redis index, GOMAXPROCS with the in-process one)")
	fs.DurationVar(&cfg.Delivery.OwnerTTL, "owner-ttl", 30*time.Second, "with a Redis index: how long this process stays alive there without a heartbeat; after it, other processes reap its connections' pins")
	fs.IntVar(&cfg.MaxConns, "max-conns", cfg.MaxConns, "WebSocket connections in total")
	fs.IntVar(&cfg.MaxConnsPerUser, "max-conns-per-user", cfg.MaxConnsPerUser, "WebSocket connections per user")
	origins := fs.String("allowed-origins", "", "comma-separated extra Origin host patterns whose pages may open sockets and call the HTTP API (CORS)")
	fs.StringVar(&cfg.Nudge.URL, "nudge-url", "", "offline nudge webhook (http:// or https://): recipients a committed message could not reach live are POSTed there, signed (docs/nudge.md); off when empty")
	secretFile := fs.String("nudge-secret-file", "", "file holding the nudge webhook's HMAC secret (or set TETRA_NUDGE_SECRET); required with --nudge-url")
	fs.IntVar(&cfg.Nudge.BatchSize, "nudge-batch-size", nudge.DefaultBatchSize, "offline nudge: most nudges per webhook request")
	fs.DurationVar(&cfg.Nudge.MaxDelay, "nudge-max-delay", nudge.DefaultMaxDelay, "offline nudge: longest a nudge waits for its batch to fill")
	fs.IntVar(&cfg.Nudge.QueueSize, "nudge-queue", nudge.DefaultQueueSize, "offline nudge: bounded queue; when full the oldest nudge is dropped (tetra_nudge_dropped_total)")
	fs.DurationVar(&cfg.Nudge.Timeout, "nudge-timeout", nudge.DefaultTimeout, "offline nudge: timeout of one webhook request")
	return func() (server.Config, error) {
		cfg.JWTSecret = os.Getenv("TETRA_JWT_SECRET")
		if cfg.Nudge.URL != "" {
			secret, err := nudgeSecret(*secretFile)
			if err != nil {
				return cfg, err
			}
			cfg.Nudge.Secret = secret
			if err := cfg.Nudge.Validate(); err != nil {
				return cfg, err
			}
		}
		if *origins != "" {
			cfg.AllowedOrigins = strings.Split(*origins, ",")
		}
		if *sentinels != "" {
			cfg.IndexSentinelAddrs = strings.Split(*sentinels, ",")
		}
		return cfg, cfg.Tuning.Validate()
	}
}

func serve(args []string, stderr io.Writer) error {
	cfg, log, drain, err := serveConfig(args, stderr)
	if err != nil {
		return err
	}
	// Everything the process logs goes through log, in its format: the
	// standard library's log package (slog.SetDefault routes it) and
	// go-redis, which would otherwise print plain text on stderr.
	slog.SetDefault(log)
	redisidx.SetLibraryLogger(log)
	if err := serveGC(log); err != nil {
		log.Error("tetra serve: cannot start", "err", err)
		return errLogged
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := server.New(ctx, cfg)
	if err == nil {
		err = srv.Start(ctx)
	}
	if err != nil {
		log.Error("tetra serve: cannot start", "err", err)
		return errLogged
	}
	<-ctx.Done()
	stop() // a second signal ends the drain early
	second, cancelSecond := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	srv.Drain(second, drain)
	cancelSecond()
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Error("tetra serve: shutdown", "err", err)
		return errLogged
	}
	return nil
}

// errLogged is returned by a command that has logged its error already (in
// the log format asked for): run exits 1 without printing it again.
var errLogged = errors.New("logged")

// serveConfig parses serve's flags and environment into the server's
// configuration, its logger (Config.Logger) and the drain (--drain); it
// starts nothing.
func serveConfig(args []string, stderr io.Writer) (server.Config, *slog.Logger, time.Duration, error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = usageWithEnv(fs, "tetra serve [flags]   (TETRA_JWT_SECRET: token secret, env only)", "demo")
	build := serverFlags(fs, true)
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	drain := fs.Duration("drain", 3*time.Second, "on SIGTERM, fail /readyz but keep serving this long before closing sockets (1001),\n"+
		"so a load balancer stops routing here first; 0 closes at once")
	demo := fs.Bool("demo", false, "demo mode: the web page signs in as alice, bob or carol (POST /demo/token mints tokens for anyone);\n"+
		"embedded default only, refused with TETRA_JWT_SECRET; listens on "+demoAddr(server.DefaultConfig().Addr)+" (loopback only)\n"+
		"unless --addr or TETRA_ADDR says otherwise; command line only (no environment variable)")
	if err := fs.Parse(args); err != nil {
		return server.Config{}, nil, 0, err
	}
	addrGiven := false
	fs.Visit(func(f *flag.Flag) { addrGiven = addrGiven || f.Name == "addr" })
	if _, ok := os.LookupEnv(envName("addr")); ok {
		addrGiven = true
	}
	demoGiven := *demo // --demo is never taken from the environment
	if err := envDefaults(fs); err != nil {
		return server.Config{}, nil, 0, err
	}
	*demo = demoGiven
	log, err := newLogger(*logFormat, *logLevel, stderr)
	if err != nil {
		return server.Config{}, nil, 0, err
	}
	cfg, err := build()
	if err != nil {
		return server.Config{}, nil, 0, err
	}
	cfg.Logger = log
	cfg.Demo = *demo
	if *drain < 0 {
		return server.Config{}, nil, 0, fmt.Errorf("--drain must be >= 0 (0: close at once), got %v", *drain)
	}
	if cfg.Demo && !addrGiven {
		// The demo mints tokens for anyone who can reach it: by default
		// only this machine can.
		cfg.Addr = demoAddr(cfg.Addr)
		log.Warn("demo mode listens on loopback only; give --addr (for example --addr :8080) to listen on other interfaces", "addr", cfg.Addr)
	}
	if _, ok := os.LookupEnv("TETRA_DEMO"); ok {
		log.Warn("TETRA_DEMO is ignored: the demo is turned on by the --demo flag only")
	}
	if err := cfg.CheckDemo(); err != nil {
		return server.Config{}, nil, 0, err
	}
	return cfg, log, *drain, nil
}

// demoAddr is addr with its host replaced by the IPv4 loopback address
// (":8080" -> "127.0.0.1:8080"), where serve --demo listens unless an
// address is given.
func demoAddr(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		port = "8080"
	}
	return net.JoinHostPort("127.0.0.1", port)
}

func token(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = usageWithEnv(fs, "tetra token --user ID [flags]")
	user := fs.String("user", "", "user id (the token's sub); required")
	dataDir := fs.String("data", "./data", "data directory whose persisted secret signs the token (ignored when TETRA_JWT_SECRET is set)")
	ttl := fs.Duration("ttl", 0, "token lifetime (0: no exp)")
	admin := fs.Bool("admin", false, "mint an admin token (for /admin endpoints) instead of a user token; refused with --user")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := envDefaults(fs); err != nil {
		return err
	}
	switch {
	case *user == "" && !*admin:
		return errors.New("--user is required (or --admin)")
	case *user != "" && *admin:
		// An admin token has no user (its sub is fixed): refuse rather than
		// print a token that is not what --user asked for.
		return fmt.Errorf("--admin and --user %q (or TETRA_USER) cannot be used together: an admin token has no user; drop one", *user)
	}
	if *ttl < 0 {
		return fmt.Errorf("--ttl must be >= 0 (0: no expiry), got %v", *ttl)
	}
	// Never create a secret here: a token signed with a secret no server
	// has would be refused by every server (issue 24, point 6).
	secret, err := auth.ReadSecret(os.Getenv("TETRA_JWT_SECRET"), *dataDir)
	if err != nil {
		return err
	}
	signer, err := auth.NewSigner(secret)
	if err != nil {
		return err
	}
	var tok string
	if *admin {
		tok, err = signer.IssueAdmin(*ttl)
	} else {
		tok, err = signer.Issue(*user, *ttl)
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}
