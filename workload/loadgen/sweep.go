package loadgen

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/tetra-messenger/tetra/workload/config"
)

// Duration is a time.Duration written in JSON as a Go duration string
// ("10s", "1m30s").
type Duration time.Duration

// UnmarshalJSON accepts a duration string or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err2 := json.Unmarshal(b, &n); err2 != nil {
			return fmt.Errorf("duration must be a string like \"10s\": %s", b)
		}
		*d = Duration(n)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// SweepRow is one configuration of a sweep: the knobs it moves and its
// load. In JSON the knobs stand beside the load fields, each under its key
// of config.Knobs ("lease": "10s", "maxPending": 20): a duration as a Go
// duration string (or a number of nanoseconds), a count as a number. Every
// knob of the table may be moved; absent knobs keep the sweep's base
// configuration; the load fields override the table's.
type SweepRow struct {
	Name string
	// Knobs maps a knob's key (config.Knob.Key) to its value as a tuning
	// file holds it (config.Tuning.Set).
	Knobs map[string]string
	SweepLoad
}

// SweepLoad is a row's load: zero (or nil) fields keep the table's.
type SweepLoad struct {
	Clients    int      `json:"clients,omitempty"`
	GroupSize  int      `json:"groupSize,omitempty"`
	Rate       float64  `json:"rate,omitempty"`
	Duration   Duration `json:"duration,omitempty"`
	StuckShare *float64 `json:"stuckShare,omitempty"`
	SlowShare  *float64 `json:"slowShare,omitempty"`
}

// sweepLoadKeys are the JSON names of SweepLoad's fields and the row's name.
var sweepLoadKeys = func() map[string]bool {
	keys := map[string]bool{"name": true}
	t := reflect.TypeOf(SweepLoad{})
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		keys[name] = true
	}
	return keys
}()

// UnmarshalJSON reads a row: its name, its load and its knobs. A key that
// is neither is an error, as is a knob value config.Tuning.Set refuses.
func (r *SweepRow) UnmarshalJSON(b []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	var row struct {
		Name string `json:"name"`
		SweepLoad
	}
	if err := json.Unmarshal(b, &row); err != nil {
		return err
	}
	*r = SweepRow{Name: row.Name, SweepLoad: row.SweepLoad}
	for key, raw := range fields {
		if sweepLoadKeys[key] || string(raw) == "null" {
			continue
		}
		k, ok := config.Lookup(key)
		if !ok {
			return fmt.Errorf("json: unknown field %q", key)
		}
		text, err := knobText(k, raw)
		if err != nil {
			return err
		}
		if r.Knobs == nil {
			r.Knobs = map[string]string{}
		}
		r.Knobs[key] = text
	}
	return r.Check()
}

// knobText is the tuning-file text of a knob's JSON value: a string as it
// is, a number as the count (or, for a duration, nanoseconds).
func knobText(k config.Knob, raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil {
		if k.Kind == config.Duration {
			return "", fmt.Errorf("%s: duration must be a string like \"10s\": %s", k.Key, raw)
		}
		return "", fmt.Errorf("%s: must be an integer: %s", k.Key, raw)
	}
	if k.Kind == config.Duration {
		return time.Duration(n).String(), nil
	}
	return strconv.FormatInt(n, 10), nil
}

// MarshalJSON writes the row as UnmarshalJSON reads it: counts as numbers,
// durations as strings.
func (r SweepRow) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(struct {
		Name string `json:"name"`
		SweepLoad
	}{r.Name, r.SweepLoad})
	if err != nil || len(r.Knobs) == 0 {
		return b, err
	}
	var t config.Tuning
	if err := r.set(&t); err != nil {
		return nil, err
	}
	out := map[string]any{}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	for key := range r.Knobs {
		k, _ := config.Lookup(key)
		out[key] = knobJSON(k, t)
	}
	return json.Marshal(out)
}

// knobJSON is k's setting in t as sweep JSON writes it: a count as a
// number, a duration as its string.
func knobJSON(k config.Knob, t config.Tuning) any {
	if k.Kind == config.Count {
		return k.Value(t)
	}
	return k.Text(t)
}

// Check reports a knob of the row that is not in config.Knobs or whose
// value config.Tuning.Set refuses.
func (r SweepRow) Check() error {
	t := config.Default()
	if err := r.set(&t); err != nil {
		return fmt.Errorf("row %q: %w", r.Name, err)
	}
	return nil
}

// set applies the row's knobs to t, in the table's order.
func (r SweepRow) set(t *config.Tuning) error {
	for key := range r.Knobs {
		if _, ok := config.Lookup(key); !ok {
			return fmt.Errorf("unknown knob %q", key)
		}
	}
	for _, k := range config.Knobs {
		if text, ok := r.Knobs[k.Key]; ok {
			if err := t.Set(k.Key, text); err != nil {
				return err
			}
		}
	}
	return nil
}

// SweepTable is a sweep: load defaults for every row, and the rows.
type SweepTable struct {
	Note     string     `json:"note,omitempty"`
	Clients  int        `json:"clients,omitempty"`
	Rate     float64    `json:"rate,omitempty"`
	Duration Duration   `json:"duration,omitempty"`
	Rows     []SweepRow `json:"rows"`
}

//go:embed sweep_default.json
var defaultSweep []byte

// DefaultSweep is the paper's table: 600 clients in pairs at 2,000 msg/s
// for 60 s, with reconnect grace, max pending and lease moved.
func DefaultSweep() SweepTable {
	t, err := ParseSweep(defaultSweep)
	if err != nil {
		panic("loadgen: embedded sweep_default.json: " + err.Error())
	}
	return t
}

// ParseSweep reads a sweep table from JSON.
func ParseSweep(b []byte) (SweepTable, error) {
	var t SweepTable
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return t, fmt.Errorf("sweep table: %w", err)
	}
	if len(t.Rows) == 0 {
		return t, errors.New("sweep table: no rows")
	}
	for i, r := range t.Rows {
		if strings.TrimSpace(r.Name) == "" {
			return t, fmt.Errorf("sweep table: row %d has no name", i+1)
		}
	}
	return t, nil
}

// Apply returns base with the row's knobs and load (then the table's load
// defaults) applied.
func (t SweepTable) Apply(base Config, r SweepRow) Config {
	c := base
	if t.Clients > 0 {
		c.Clients = t.Clients
	}
	if t.Rate > 0 {
		c.Rate = t.Rate
	}
	if t.Duration > 0 {
		c.Duration = time.Duration(t.Duration)
	}
	if r.Clients > 0 {
		c.Clients = r.Clients
	}
	if r.GroupSize > 0 {
		c.GroupSize = r.GroupSize
	}
	if r.Rate > 0 {
		c.Rate = r.Rate
	}
	if r.Duration > 0 {
		c.Duration = time.Duration(r.Duration)
	}
	if r.StuckShare != nil {
		c.StuckShare = *r.StuckShare
	}
	if r.SlowShare != nil {
		c.SlowShare = *r.SlowShare
	}
	// ParseSweep checked the knobs (SweepRow.Check); a row built in code
	// with a bad one keeps the base's setting of it.
	for _, k := range config.Knobs {
		if text, ok := r.Knobs[k.Key]; ok {
			_ = c.Server.Tuning.Set(k.Key, text)
		}
	}
	return c
}

// SweepResult is one row's outcome: a report, or the error that stopped it.
type SweepResult struct {
	Row    SweepRow    `json:"row"`
	Config SweepConfig `json:"config"`
	Report *Report     `json:"report,omitempty"`
	Err    string      `json:"error,omitempty"`
}

// SweepConfig is what a row ran with: its load, and every knob's setting
// (config.Knobs), written in JSON beside the load under the knob's key (a
// count as a number, a duration as its string).
type SweepConfig struct {
	Clients    int     `json:"clients"`
	GroupSize  int     `json:"groupSize"`
	Rate       float64 `json:"rate"`
	Duration   string  `json:"duration"`
	StuckShare float64 `json:"stuckShare"`
	SlowShare  float64 `json:"slowShare"`
	// Tuning is the server's tuning.
	Tuning config.Tuning `json:"-"`
}

// sweepConfig is the SweepConfig of cfg.
func sweepConfig(cfg Config) SweepConfig {
	return SweepConfig{Clients: cfg.Clients, GroupSize: cfg.GroupSize, Rate: cfg.Rate, Duration: cfg.Duration.String(),
		StuckShare: cfg.StuckShare, SlowShare: cfg.SlowShare, Tuning: cfg.Server.Tuning}
}

// MarshalJSON writes the load fields and every knob.
func (c SweepConfig) MarshalJSON() ([]byte, error) {
	type load SweepConfig // without the method
	b, err := json.Marshal(load(c))
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	for _, k := range config.Knobs {
		out[k.Key] = knobJSON(k, c.Tuning)
	}
	return json.Marshal(out)
}

// Sweep runs every row of t in order, each against a fresh server started
// from base with the row applied, then writes into outDir: sweep.md (the
// Markdown table), sweep.json (every report) and the charts
// deliveries_per_accepted.png, outbox_peak.png and latency_p99.png. A row
// whose run fails is recorded with its error and the sweep goes on.
func Sweep(ctx context.Context, base Config, t SweepTable, outDir string, progress io.Writer) ([]SweepResult, error) {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	var results []SweepResult
	for i, row := range t.Rows {
		if err := ctx.Err(); err != nil {
			return results, err
		}
		cfg := t.Apply(base, row)
		res := SweepResult{Row: row, Config: sweepConfig(cfg)}
		if progress != nil {
			fmt.Fprintf(progress, "sweep row %d/%d: %s (%d clients, %.0f msg/s, %v)\n", i+1, len(t.Rows), row.Name, cfg.Clients, cfg.Rate, cfg.Duration)
		}
		rep, err := Run(ctx, cfg)
		if err != nil {
			res.Err = err.Error()
		} else {
			res.Report = rep
		}
		if progress != nil {
			if rep != nil {
				fmt.Fprint(progress, rep.String())
			} else {
				fmt.Fprintf(progress, "row failed: %v\n", err)
			}
		}
		results = append(results, res)
		// Write what is known after every row, so an interrupted sweep
		// leaves its finished rows.
		if err := WriteSweep(outDir, results); err != nil {
			return results, err
		}
	}
	return results, nil
}

// WriteSweep writes sweep.md, sweep.json and the charts for results.
func WriteSweep(outDir string, results []SweepResult) error {
	f, err := os.Create(filepath.Join(outDir, "sweep.md"))
	if err != nil {
		return err
	}
	if err := WriteMarkdown(f, results); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(outDir, "sweep.json"), b, 0o644); err != nil {
		return err
	}
	return WriteCharts(outDir, results)
}

func fmtMiB(b int64) string {
	if b <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}

func fmtCount(n int64) string {
	if n < 0 {
		return "n/a"
	}
	return fmt.Sprint(n)
}

func fmtMap(m map[string]int64) string {
	var parts []string
	for _, k := range []string{"idle", "overload", "attempts", "superseded", "shutdown"} {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, ", ")
}

// WriteMarkdown renders results as a Markdown table.
func WriteMarkdown(w io.Writer, results []SweepResult) error {
	var b strings.Builder
	b.WriteString("| Configuration | clients · rate · duration | accepted/s | deliver / accepted | outbox peak / final | lost | reconnects | withdrawals | latency p50 / p99 / p99.9 | server CPU · peak RSS |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		load := fmt.Sprintf("%d · %.0f msg/s · %s", r.Config.Clients, r.Config.Rate, r.Config.Duration)
		if r.Report == nil {
			fmt.Fprintf(&b, "| %s | %s | run failed: %s | | | | | | | |\n", r.Row.Name, load, strings.ReplaceAll(r.Err, "|", "/"))
			continue
		}
		p := r.Report
		cpu := "n/a"
		if p.ServerCPUSeconds > 0 {
			cpu = fmt.Sprintf("%.0f s", p.ServerCPUSeconds)
		}
		ms := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)) }
		procs := ""
		if p.Replicas > 1 {
			procs = fmt.Sprintf(" (sum of %d processes)", p.Replicas)
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.2f | %s / %s | %d | %d | %s | %s / %s / %s ms | %s · %s%s |\n",
			r.Row.Name, load, p.AchievedRate, p.DeliveriesPerAcc, fmtCount(p.OutboxPeak), fmtCount(p.OutboxFinal), p.Lost,
			p.Reconnects, fmtMap(p.Withdrawals), ms(p.LatencyP50), ms(p.LatencyP99), ms(p.LatencyP999), cpu, fmtMiB(p.ServerPeakRSS), procs)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteCharts draws one bar chart per measure over the rows that ran:
// deliveries_per_accepted.png, outbox_peak.png and latency_p99.png.
func WriteCharts(outDir string, results []SweepResult) error {
	var names []string
	var ratio, peak, p99 plotter.Values
	for i, r := range results {
		if r.Report == nil {
			continue
		}
		names = append(names, fmt.Sprintf("%d", i+1))
		ratio = append(ratio, r.Report.DeliveriesPerAcc)
		peak = append(peak, float64(max(r.Report.OutboxPeak, 0)))
		p99 = append(p99, float64(r.Report.LatencyP99)/float64(time.Millisecond))
	}
	if len(names) == 0 {
		return nil
	}
	legend := legendOf(results)
	for _, c := range []struct {
		file, title, ylabel string
		v                   plotter.Values
	}{
		{"deliveries_per_accepted.png", "Deliveries per accepted", "frames / expected", ratio},
		{"outbox_peak.png", "Peak outbox depth", "rows", peak},
		{"latency_p99.png", "Delivery latency p99", "ms", p99},
	} {
		if err := barChart(filepath.Join(outDir, c.file), c.title, c.ylabel, legend, names, c.v); err != nil {
			return fmt.Errorf("chart %s: %w", c.file, err)
		}
	}
	return nil
}

func legendOf(results []SweepResult) string {
	var parts []string
	for i, r := range results {
		if r.Report != nil {
			parts = append(parts, fmt.Sprintf("%d: %s", i+1, r.Row.Name))
		}
	}
	return strings.Join(parts, "   ")
}

func barChart(path, title, ylabel, legend string, names []string, v plotter.Values) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.X.Label.Text = "configuration (row)"
	p.Y.Min = 0
	bars, err := plotter.NewBarChart(v, vg.Points(28))
	if err != nil {
		return err
	}
	bars.Color = color.RGBA{R: 37, G: 99, B: 235, A: 255}
	bars.LineStyle.Width = 0
	p.Add(bars)
	p.NominalX(names...)
	// Values on top of the bars, for reading without a legend lookup.
	labels := make([]string, len(v))
	xys := make(plotter.XYs, len(v))
	for i, y := range v {
		xys[i] = plotter.XY{X: float64(i), Y: y}
		labels[i] = strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", y), "0"), ".")
	}
	if lab, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels}); err == nil {
		p.Add(lab)
	}
	if legend != "" {
		p.Title.Text = title + "\n" + wrap(legend, 90)
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}

func wrap(s string, width int) string {
	var lines []string
	var cur string
	for _, part := range strings.Split(s, "   ") {
		if cur != "" && len(cur)+len(part)+3 > width {
			lines = append(lines, cur)
			cur = ""
		}
		if cur != "" {
			cur += "   "
		}
		cur += part
	}
	if cur != "" {
		lines = append(lines, cur)
	}
	return strings.Join(lines, "\n")
}
