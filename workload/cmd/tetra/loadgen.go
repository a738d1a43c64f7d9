package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tetra-messenger/tetra/workload/loadgen"
)

func loadgenCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := loadgen.DefaultConfig()
	fs.Usage = usageWithEnv(fs, "tetra loadgen [flags]   (the server knobs apply to the server the run starts)")
	build := serverFlags(fs, false) // the knobs of the server the run starts
	url := fs.String("url", "", "target a running server instead of starting one (needs TETRA_JWT_SECRET)")
	clients := fs.Int("clients", def.Clients, "WebSocket clients (one user each)")
	group := fs.Int("group-size", def.GroupSize, "members per chat: 2 = pairs in direct chats, more = group chats")
	rate := fs.Float64("rate", def.Rate, "total messages per second")
	duration := fs.Duration("duration", def.Duration, "length of the send phase")
	drain := fs.Duration("drain", def.Drain, "longest wait after sending for deliveries and the outbox to drain")
	body := fs.Int("body-bytes", def.BodyBytes, "bytes per message body (>= 24)")
	inProcess := fs.Bool("in-process", false, "run the server inside this process (no server RSS/CPU in the report)")
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
	cfg := loadgen.Config{URL: *url, Secret: os.Getenv("TETRA_JWT_SECRET"), InProcess: *inProcess, Server: scfg,
		Clients: *clients, GroupSize: *group, Rate: *rate, Duration: *duration, Drain: *drain, BodyBytes: *body}
	if !*quiet {
		cfg.Progress = stderr
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
		return fmt.Errorf("%d accepted deliveries lost", rep.Lost)
	}
	return nil
}
