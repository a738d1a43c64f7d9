// Package browser_test runs the web client (workload/web) in headless
// Chromium against a real server started in process.
//
// TestBrowser starts one server per scenario (SQLite in t.TempDir(), demo
// on, a fixed loopback port so the page can find it again after a restart)
// plus a small control endpoint, then runs `node e2e.mjs <scenario>` with
// TETRA_URL and TETRA_CONTROL_URL set; a non-zero exit fails the subtest.
// The control endpoint lets the script stop and start the server on the same
// data directory, send messages from Go (workload/client) while the
// browsers are away, and move stored messages back in time (the day
// separators need days that a test run does not last).
//
// Prerequisites: node (20+), Chromium at /usr/bin/chromium (or $CHROMIUM)
// and `npm ci --prefix test/browser`. When one is missing the test skips
// loudly, or fails with CI=true, like every test that needs something
// outside Go (internal/testenv).
package browser_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/client"
	"github.com/tetra-messenger/tetra/workload/server"

	_ "modernc.org/sqlite" // the backdate control opens the server's database
)

// scenarios are the scenario names of e2e.mjs run by TestBrowser, in order.
var scenarios = []string{
	"two_users", "restart", "html_is_text", "unicode", "long_history", "bad_token", "token_refresh",
	// issue 14: the page at real sizes, read state, membership, chat events
	"members", "chat_events", "read_state", "links", "bidi_zalgo", "days_groups", "phone", "readme",
	"tap_during_render",
	// issue 23: PROTOCOL.md §7 in the page
	"paging", "edit_delete", "typing_presence", "admins",
}

// scenarioConfig adjusts the server of a scenario.
var scenarioConfig = map[string]func(*server.Config){
	// Demo tokens live 4 s: the page must refresh them on its socket.
	"token_refresh": func(c *server.Config) { c.DemoTokenTTL = 4 * time.Second },
}

// scenarioTimeout bounds one `node e2e.mjs` run.
const scenarioTimeout = 4 * time.Minute

// browserTools returns node and chromium, or skips (fails with CI=true)
// when they or test/browser/node_modules are missing.
func browserTools(t *testing.T) (node, chromium string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Unavailable(t, "node", "Install Node.js 20+ (apt-get install -y nodejs npm).", err)
	}
	chromium = os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		testenv.Unavailable(t, "Chromium at "+chromium, "Install it with `apt-get update && apt-get install -y chromium` or set CHROMIUM.", err)
	}
	if _, err := os.Stat(filepath.Join("node_modules", "playwright-core", "package.json")); err != nil {
		testenv.Unavailable(t, "test/browser/node_modules (playwright-core)", "Run `npm ci --prefix test/browser`.", err)
	}
	return node, chromium
}

func TestBrowser(t *testing.T) {
	node, chromium := browserTools(t)
	for _, name := range scenarios {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, scenarioConfig[name])
			ctx, cancel := context.WithTimeout(t.Context(), scenarioTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "e2e.mjs", name)
			cmd.Env = append(os.Environ(), "TETRA_URL="+h.url, "TETRA_CONTROL_URL="+h.control.URL, "CHROMIUM="+chromium)
			out := &bytes.Buffer{}
			cmd.Stdout, cmd.Stderr = io.MultiWriter(out, t.Output()), io.MultiWriter(out, t.Output())
			cmd.WaitDelay = 5 * time.Second
			if err := cmd.Run(); err != nil {
				t.Fatalf("node e2e.mjs %s: %v (screenshots in test/browser/screenshots)", name, err)
			}
			if !strings.Contains(out.String(), "ok   "+name) {
				t.Fatalf("node e2e.mjs %s exited 0 without reporting the scenario", name)
			}
		})
	}
}

// TestClientModule runs the unit tests of client.js (client.test.mjs) under
// node:test; they need node only.
func TestClientModule(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Unavailable(t, "node", "Install Node.js 20+ (apt-get install -y nodejs npm).", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "client.test.mjs")
	cmd.Stdout, cmd.Stderr = t.Output(), t.Output()
	if err := cmd.Run(); err != nil {
		t.Fatalf("node --test client.test.mjs: %v", err)
	}
}

// harness is one server on a fixed address that the control endpoint can
// stop and start again on the same data directory.
type harness struct {
	t       *testing.T
	cfg     server.Config
	url     string
	logs    *testenv.LogBuffer
	control *httptest.Server

	mu  sync.Mutex
	srv *server.Server
}

// newHarness starts a demo server for t, after applying mutate (may be nil)
// to its configuration.
func newHarness(t *testing.T, mutate func(*server.Config)) *harness {
	t.Helper()
	h := &harness{t: t, logs: &testenv.LogBuffer{}}
	cfg := server.DefaultConfig()
	cfg.Addr = testenv.FreeAddr(t)
	cfg.DataDir = t.TempDir()
	cfg.Demo = true
	cfg.ShutdownGrace = 5 * time.Second
	cfg.Tuning.SendsPerSecond = 5000 // the long-history scenario sends 1100 messages from Go
	cfg.Logger = slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if mutate != nil {
		mutate(&cfg)
	}
	h.cfg = cfg
	h.url = "http://" + cfg.Addr
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log (tail):\n%s", h.logs.Tail(80))
		}
	})
	if err := h.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.stop(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /stop", func(w http.ResponseWriter, r *http.Request) { h.answer(w, h.stop()) })
	mux.HandleFunc("POST /start", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Send *sendRequest }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			h.answer(w, err)
			return
		}
		err := h.start()
		if err == nil && req.Send != nil {
			err = h.send(r.Context(), *req.Send)
		}
		h.answer(w, err)
	})
	mux.HandleFunc("POST /backdate", func(w http.ResponseWriter, r *http.Request) {
		var req backdateRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			h.answer(w, err)
			return
		}
		h.answer(w, h.backdate(req))
	})
	mux.HandleFunc("POST /send", func(w http.ResponseWriter, r *http.Request) {
		var req sendRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			h.answer(w, err)
			return
		}
		h.answer(w, h.send(r.Context(), req))
	})
	h.control = httptest.NewServer(mux)
	t.Cleanup(h.control.Close)
	return h
}

func (h *harness) answer(w http.ResponseWriter, err error) {
	if err != nil {
		h.t.Logf("control: %v", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintln(w, "{}")
}

// start starts a server on the harness's address and data directory
// (a no-op when one runs).
func (h *harness) start() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.srv != nil {
		return nil
	}
	srv, err := server.New(context.Background(), h.cfg)
	if err != nil {
		return fmt.Errorf("server.New: %w", err)
	}
	// The port was free a moment ago; after a restart the old listener may
	// take a moment to let go of it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err = srv.Start(context.Background())
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
		if srv, err = server.New(context.Background(), h.cfg); err != nil {
			return fmt.Errorf("server.New: %w", err)
		}
	}
	if err != nil {
		return fmt.Errorf("server.Start: %w", err)
	}
	h.srv = srv
	return nil
}

// stop shuts the server down (a no-op when none runs).
func (h *harness) stop() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := h.srv.Shutdown(ctx)
	h.srv = nil
	return err
}

// backdateRequest asks the harness to give the messages of ChatID with
// these bodies these sent times (RFC 3339).
type backdateRequest struct {
	ChatID string            `json:"chatId"`
	Times  map[string]string `json:"times"`
}

// backdate stops the server, rewrites the messages' sent_at in its SQLite
// database (the embedded default's schema: Unix nanoseconds) and starts it
// again, so no cache of the old times survives. Test-only: nothing in the
// protocol lets a client choose a message's time.
func (h *harness) backdate(req backdateRequest) error {
	if err := h.stop(); err != nil {
		return err
	}
	db, err := sql.Open("sqlite", filepath.Join(h.cfg.DataDir, "tetra.db"))
	if err != nil {
		return err
	}
	defer db.Close()
	for body, at := range req.Times {
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return fmt.Errorf("backdate %q: %w", body, err)
		}
		res, err := db.Exec(`UPDATE history SET sent_at = ? WHERE chat_id = ? AND body = ?`, t.UnixNano(), req.ChatID, body)
		if err != nil {
			return fmt.Errorf("backdate %q: %w", body, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("backdate %q: %d messages of chat %s have this body, want 1", body, n, req.ChatID)
		}
	}
	if err := db.Close(); err != nil {
		return err
	}
	return h.start()
}

// sendRequest asks the harness to send bodies to a chat as user, from a
// Go client on device (not a browser).
type sendRequest struct {
	User   string   `json:"user"`
	Device string   `json:"device"`
	ChatID string   `json:"chatId"`
	Bodies []string `json:"bodies"`
}

// send sends every body and returns once all are accepted. Up to 32 sends
// are in flight at once, so the commit order may differ from the order of
// req.Bodies; the scenarios compare with history, not with that order.
func (h *harness) send(ctx context.Context, req sendRequest) error {
	h.mu.Lock()
	srv := h.srv
	h.mu.Unlock()
	if srv == nil {
		return errors.New("send: the server is stopped")
	}
	tok, err := srv.Signer().Issue(req.User, time.Hour)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, client.Config{URL: h.url, Token: tok, Device: req.Device,
		Chats: func(context.Context) ([]string, error) { return nil, nil }}) // no history sync needed
	if err != nil {
		return fmt.Errorf("send: dial as %s: %w", req.User, err)
	}
	defer c.Close()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, 32)
	)
	for i, body := range req.Bodies {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := c.Send(ctx, req.ChatID, body); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("send #%d as %s: %w", i, req.User, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
