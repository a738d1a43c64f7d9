package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/config"
)

func TestDefaultSweepIsThePapersTable(t *testing.T) {
	t.Parallel()
	tab := DefaultSweep()
	if len(tab.Rows) != 5 || tab.Clients != 600 || tab.Rate != 2000 {
		t.Fatalf("default sweep: %d rows, %d clients, %v msg/s", len(tab.Rows), tab.Clients, tab.Rate)
	}
	base := DefaultConfig()
	c := tab.Apply(base, tab.Rows[3]) // grace 3s · pending 9 · lease 20s
	if c.Server.Tuning.ReconnectGrace != 3*time.Second || c.Server.Tuning.MaxPending != 9 || c.Server.Tuning.Lease != 20*time.Second {
		t.Fatalf("row 4 applied: %+v", c.Server.Tuning)
	}
	if c.Clients != 600 || c.Rate != 2000 || c.Duration != time.Minute {
		t.Fatalf("row 4 load: %d clients %v msg/s %v", c.Clients, c.Rate, c.Duration)
	}
	// The knobs reach a child server as flags.
	args := strings.Join(TuningArgs(c.Server.Tuning), " ")
	for _, want := range []string{"--reconnect-grace=3s", "--max-pending=9", "--lease=20s", "--max-delivery-attempts=", "--outbox-retention="} {
		if !strings.Contains(args, want) {
			t.Errorf("child args %q lack %q", args, want)
		}
	}
}

func TestTinySweepWritesTableAndCharts(t *testing.T) {
	t.Parallel()
	tab, err := ParseSweep([]byte(`{"clients": 10, "rate": 50, "duration": "2s", "rows": [
		{"name": "lease 10s", "lease": "10s", "maxPending": 20},
		{"name": "lease 5s grace 1s", "lease": "5s", "reconnectGrace": "1s"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	res, err := Sweep(context.Background(), shortConfig(), tab, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("%d results", len(res))
	}
	for _, r := range res {
		if r.Report == nil {
			t.Fatalf("row %s failed: %s", r.Row.Name, r.Err)
		}
		if r.Report.Lost != 0 || r.Report.Clients != 10 {
			t.Fatalf("row %s: lost %d, clients %d", r.Row.Name, r.Report.Lost, r.Report.Clients)
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "sweep.md"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", md)
	if !strings.Contains(string(md), "| lease 10s |") || !strings.Contains(string(md), "| lease 5s grace 1s |") || !strings.Contains(string(md), "|---|") {
		t.Fatalf("sweep.md:\n%s", md)
	}
	for _, f := range []string{"deliveries_per_accepted.png", "outbox_peak.png", "latency_p99.png"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if r := img.Bounds(); r.Dx() < 100 || r.Dy() < 100 {
			t.Fatalf("%s: %v", f, r)
		}
	}
}

// Clients that never ack are withdrawn by the server, and their final
// resync from history leaves nothing lost.
func TestStuckClientsAreWithdrawnAndLoseNothing(t *testing.T) {
	t.Parallel()
	cfg := shortConfig()
	cfg.Clients, cfg.Rate, cfg.Duration = 20, 200, 3*time.Second
	cfg.StuckShare, cfg.SlowShare, cfg.SlowAckDelay = 0.1, 0.1, 300*time.Millisecond
	cfg.Server.Tuning.MaxPending = 5
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", rep)
	if rep.StuckClients != 2 || rep.SlowClients != 2 {
		t.Fatalf("stuck %d slow %d, want 2 and 2", rep.StuckClients, rep.SlowClients)
	}
	if rep.Lost != 0 {
		t.Fatalf("lost %d", rep.Lost)
	}
	var w int64
	for _, n := range rep.Withdrawals {
		w += n
	}
	if w == 0 {
		t.Fatalf("no withdrawals reported: %v", rep.Withdrawals)
	}
}

func TestKindOfSpreadsShares(t *testing.T) {
	t.Parallel()
	var stuck, slow int
	for i := 0; i < 600; i++ {
		switch kindOf(i, 0.05, 0.10) {
		case stuckClient:
			stuck++
		case slowClient:
			slow++
		}
	}
	if stuck != 30 || slow < 55 || slow > 60 {
		t.Fatalf("600 clients at 5%% stuck, 10%% slow: %d stuck, %d slow", stuck, slow)
	}
}

// TestSweepCarriesEveryKnob: every knob of config.Knobs can be moved by a
// sweep row (under its key), reaches the server's tuning through Apply,
// and is written back in the row and in the result's config, so a knob
// added to the table is carried without a field of its own here.
func TestSweepCarriesEveryKnob(t *testing.T) {
	t.Parallel()
	def := config.Default()
	for _, k := range config.Knobs {
		// A valid value other than the default: the lowest allowed, or
		// the next one when that is the default.
		want := k.Min
		if want == k.Value(def) {
			want++
		}
		var v any = want
		if k.Kind == config.Duration {
			v = time.Duration(want).String()
		}
		row, _ := json.Marshal(map[string]any{"name": k.Key, k.Key: v})
		tab, err := ParseSweep([]byte(`{"rows": [` + string(row) + `]}`))
		if err != nil {
			t.Errorf("%s: %v", k.Key, err)
			continue
		}
		c := tab.Apply(DefaultConfig(), tab.Rows[0])
		if got := k.Value(c.Server.Tuning); got != want {
			t.Errorf("%s: row %s applied %d, want %d", k.Key, row, got, want)
		}
		for _, other := range config.Knobs {
			if other.Key != k.Key && other.Value(c.Server.Tuning) != other.Value(DefaultConfig().Server.Tuning) {
				t.Errorf("%s: the row moved %s too", k.Key, other.Key)
			}
		}
		// Written back: the row as read, and the result's config.
		b, err := json.Marshal(SweepResult{Row: tab.Rows[0], Config: sweepConfig(c)})
		if err != nil {
			t.Fatalf("%s: %v", k.Key, err)
		}
		var back struct {
			Row    map[string]any `json:"row"`
			Config map[string]any `json:"config"`
		}
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		wantJSON, _ := json.Marshal(v)
		for where, m := range map[string]map[string]any{"row": back.Row, "config": back.Config} {
			if got, _ := json.Marshal(m[k.Key]); string(got) != string(wantJSON) {
				t.Errorf("%s: %s JSON has %s, want %s (%s)", k.Key, where, got, wantJSON, b)
			}
		}
		if len(back.Config) != len(config.Knobs)+6 {
			t.Errorf("%s: config JSON has %d fields, want the 6 of the load and the %d knobs: %s", k.Key, len(back.Config), len(config.Knobs), b)
		}
	}
}

// TestSweepRowRefusesUnknownKnobs: a key that is neither a load field nor
// a knob, and a knob value the tuning refuses, fail the table.
func TestSweepRowRefusesUnknownKnobs(t *testing.T) {
	t.Parallel()
	for _, row := range []string{
		`{"name": "x", "leese": "10s"}`,
		`{"name": "x", "lease": "ten seconds"}`,
		`{"name": "x", "maxPending": 2.5}`,
	} {
		if _, err := ParseSweep([]byte(`{"rows": [` + row + `]}`)); err == nil {
			t.Errorf("ParseSweep accepted %s", row)
		}
	}
	// The forms of the old fields still read: a duration in nanoseconds.
	tab, err := ParseSweep([]byte(`{"rows": [{"name": "x", "lease": 20000000000, "maxPending": 9}]}`))
	if err != nil {
		t.Fatal(err)
	}
	c := tab.Apply(DefaultConfig(), tab.Rows[0])
	if c.Server.Tuning.Lease != 20*time.Second || c.Server.Tuning.MaxPending != 9 {
		t.Fatalf("applied %+v", c.Server.Tuning)
	}
}
