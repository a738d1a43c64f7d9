package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/server"
)

// BenchmarkE2EPair measures one message end to end on the embedded
// default over real sockets: alice sends (64 in flight), the server
// commits it (group commit, synchronous=FULL), answers accepted and pushes
// it to bob, who acknowledges every frame as it arrives. One op is one
// message accepted and delivered; ns/op is the wall time per message with
// client and server on the same machine, so it moves with the commit path,
// the delivery path and the codec together (docs/benchmarks.md, "Hot
// paths"). cpu-µs/msg is the process's CPU per message, the two clients'
// share included.
func BenchmarkE2EPair(b *testing.B) {
	pairRun(b, b.N, func() func(int) {
		b.ReportAllocs()
		b.ResetTimer()
		return testenv.CPUPer(b, "msg") // client and server: one process
	})
}

// Every message of a burst far past bob's push window (64 sends in flight,
// a window of 20) reaches him live: the window fills and empties all the
// time, so the fast path sheds to the poller and the catch-up, and the
// poller passes the commits the fast path delivered whole (delivery's
// cover.go). A row the poller passes without anyone delivering it hangs
// this test (it did, when a row skipped for a member behind its window was
// counted as delivered).
func TestE2EPairBurstsPastTheWindowArriveLive(t *testing.T) {
	srv := pairRun(t, 4000, func() func(int) { return func(int) {} })
	st := srv.Engine().Stats()
	t.Logf("fast %d, polled %d, redelivered %d, shed %d, deferred %d, outbox rows the poller passed unread %d",
		st.FastDeliveries, st.PollDeliveries, st.Redeliveries, st.FastShed, st.Deferred, st.ScanSkipped)
}

// pairRun is BenchmarkE2EPair's conversation: n messages from alice to
// bob, every one answered and received live within two minutes.
func pairRun(b testing.TB, n int, start func() func(int)) *server.Server {
	cfg := server.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.DataDir = b.TempDir()
	cfg.JWTSecret = "bench-secret-bench-secret-bench-secret"
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Tuning.SendsPerSecond = 1_000_000
	cfg.Tuning.FanoutPerSecond = 1_000_000
	cfg.Tuning.MaxInFlightSends = 64
	// A benchmark's reads take a context that never ends, as the
	// server's do (a deadline costs the client a timer per frame); the
	// test's end after two minutes.
	ctx := context.Background()
	if _, bench := b.(*testing.B); !bench {
		var cancelRun context.CancelFunc
		ctx, cancelRun = context.WithTimeout(ctx, 2*time.Minute)
		defer cancelRun()
	}
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
	alice, bob := tok("alice"), tok("bob")
	req, _ := http.NewRequest("POST", srv.URL()+"/api/chats", strings.NewReader(`{"kind":"direct","members":["bob"]}`))
	req.Header.Set("Authorization", "Bearer "+alice)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	var chat struct {
		ChatID string `json:"chatId"`
	}
	err = json.NewDecoder(resp.Body).Decode(&chat)
	resp.Body.Close()
	if err != nil || chat.ChatID == "" {
		b.Fatalf("create chat: %v %+v", err, chat)
	}
	dial := func(token string) *websocket.Conn {
		c, _, err := websocket.Dial(ctx, strings.Replace(srv.URL(), "http", "ws", 1)+"/ws?token="+token, nil)
		if err != nil {
			b.Fatal(err)
		}
		c.SetReadLimit(1 << 20)
		if _, _, err := c.Read(ctx); err != nil { // hello
			b.Fatal(err)
		}
		return c
	}
	ws, wr := dial(alice), dial(bob)
	defer ws.CloseNow()
	defer wr.CloseNow()

	cpu := start()
	want := n
	// bob: read every message frame, acknowledge it at once.
	received := make(chan error, 1)
	go func() {
		n := 0
		for n < want {
			_, data, err := wr.Read(ctx)
			if err != nil {
				received <- err
				return
			}
			if !bytes.Contains(data, []byte(`"type":"message"`)) {
				continue
			}
			var m struct {
				MessageID string `json:"messageId"`
			}
			if err := json.Unmarshal(data, &m); err != nil {
				received <- err
				return
			}
			ack := fmt.Appendf(nil, `{"type":"ack","messageIds":[%q]}`, m.MessageID)
			if err := wr.Write(ctx, websocket.MessageText, ack); err != nil {
				received <- err
				return
			}
			n++
		}
		received <- nil
	}()
	// alice: keep 64 sends in flight; the reader frees a slot per answer.
	slots := make(chan struct{}, 64)
	answered := make(chan error, 1)
	go func() {
		for n := 0; n < want; {
			_, data, err := ws.Read(ctx)
			if err != nil {
				answered <- err
				return
			}
			if bytes.Contains(data, []byte(`"type":"accepted"`)) {
				n++
				<-slots
			} else if bytes.Contains(data, []byte(`"type":"error"`)) {
				answered <- fmt.Errorf("send refused: %s", data)
				return
			}
		}
		answered <- nil
	}()
	for i := 0; i < want; i++ {
		slots <- struct{}{}
		f := fmt.Appendf(nil, `{"type":"send","chatId":%q,"correlationId":"b-%d","body":"a hundred bytes of body text, as in the load ladder, padded out to length .................."}`, chat.ChatID, i)
		if err := ws.Write(ctx, websocket.MessageText, f); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-answered; err != nil {
		b.Fatal(err)
	}
	if err := <-received; err != nil {
		b.Fatal(err)
	}
	cpu(want)
	return srv
}
