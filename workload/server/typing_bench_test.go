package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/server"
)

// BenchmarkTypingFanout is the harness for PROTOCOL.md §7.4's cost target:
// 100 members typing at once in one group must cost less than 5 % extra
// server CPU at 1,000 msg/s. Each op is one second of load on the
// embedded default: a 1:1 pair sends 1,000 messages (acknowledged as they
// arrive) while the 100 connected members of one group each send a typing
// frame every 200 ms ("typing" sub-benchmark) or stay quiet ("quiet"). It
// reports the process's CPU per second of load (cpu-µs/s; clients
// and server share the process, so compare the two sub-benchmarks'
// difference with the quiet figure) and the typing frames received.
// Not run by make test; run it alone on an idle machine:
//
//	go test -run XXX -bench BenchmarkTypingFanout -benchtime 20x ./workload/server/
func BenchmarkTypingFanout(b *testing.B) {
	for _, typing := range []bool{false, true} {
		name := "quiet"
		if typing {
			name = "typing"
		}
		b.Run(name, func(b *testing.B) { benchTyping(b, typing) })
	}
}

func benchTyping(b *testing.B, typing bool) {
	cfg := server.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.DataDir = b.TempDir()
	cfg.JWTSecret = "bench-secret-bench-secret-bench-secret"
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Tuning.SendsPerSecond = 1_000_000
	cfg.Tuning.FanoutPerSecond = 1_000_000
	cfg.Tuning.MaxInFlightSends = 64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := server.New(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	tok := func(u string) string {
		t, err := srv.Signer().Issue(u, time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		return t
	}
	create := func(user, body string) string {
		req, _ := http.NewRequest("POST", srv.URL()+"/api/chats", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok(user))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		var c struct {
			ChatID string `json:"chatId"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || c.ChatID == "" {
			b.Fatalf("create chat: %v", err)
		}
		return c.ChatID
	}
	members := make([]string, 100)
	for i := range members {
		members[i] = fmt.Sprintf("m%03d", i)
	}
	quoted, _ := json.Marshal(members[1:])
	group := create(members[0], `{"kind":"group","title":"typing","members":`+string(quoted)+`}`)
	pair := create("alice", `{"kind":"direct","members":["bob"]}`)
	dial := func(user string) *websocket.Conn {
		c, _, err := websocket.Dial(ctx, strings.Replace(srv.URL(), "http", "ws", 1)+"/ws?token="+tok(user), nil)
		if err != nil {
			b.Fatal(err)
		}
		c.SetReadLimit(1 << 20)
		return c
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var mu sync.Mutex
	typingFrames := 0
	for _, m := range members {
		c := dial(m)
		wg.Go(func() { // read and count
			for {
				_, data, err := c.Read(ctx)
				if err != nil {
					return
				}
				if strings.Contains(string(data), `"type":"typing"`) {
					mu.Lock()
					typingFrames++
					mu.Unlock()
				}
			}
		})
		if typing {
			wg.Go(func() {
				t := time.NewTicker(200 * time.Millisecond)
				defer t.Stop()
				f := []byte(`{"type":"typing","chatId":"` + group + `"}`)
				for {
					select {
					case <-ctx.Done():
						return
					case <-t.C:
						if c.Write(ctx, websocket.MessageText, f) != nil {
							return
						}
					}
				}
			})
		}
	}
	ws, wr := dial("alice"), dial("bob")
	wg.Go(func() { // bob acknowledges every message
		for {
			_, data, err := wr.Read(ctx)
			if err != nil {
				return
			}
			var m struct{ Type, MessageID string }
			if json.Unmarshal(data, &m) == nil && m.Type == "message" {
				_ = wr.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"type":"ack","messageIds":[%q]}`, m.MessageID))
			}
		}
	})
	wg.Go(func() { // alice's answers
		for {
			if _, _, err := ws.Read(ctx); err != nil {
				return
			}
		}
	})
	time.Sleep(time.Second) // connections settle
	b.ResetTimer()
	mu.Lock()
	typingFrames = 0
	mu.Unlock()
	cpu := testenv.CPUPer(b, "s")
	start := time.Now()
	sent := 0
	for b.Loop() {
		// One second: 1,000 sends, paced in 10 ms steps.
		next := time.Now()
		for range 100 {
			for range 10 {
				f := fmt.Appendf(nil, `{"type":"send","chatId":%q,"correlationId":"t-%d","body":"a hundred bytes of body text, as in the load ladder, padded out to length .................."}`, pair, sent)
				sent++
				if err := ws.Write(ctx, websocket.MessageText, f); err != nil {
					b.Fatal(err)
				}
			}
			next = next.Add(10 * time.Millisecond)
			time.Sleep(time.Until(next))
		}
	}
	wall := time.Since(start)
	cpu(int(wall / time.Second))
	mu.Lock()
	b.ReportMetric(float64(typingFrames)/wall.Seconds(), "typing-frames/s")
	mu.Unlock()
}
