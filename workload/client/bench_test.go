package client

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/protocol"
)

// The benchmarks below measure the client's own cost per frame, in CPU
// time (cpu-µs/frame, testenv.CPUPer), as the load generator uses it:
// many clients in one process, each frame answered on its own (one ack
// frame per message, one accepted per send), as at a load generator's
// per-client rate. The server is a minimal one in this process (pre-encoded
// frames, one read per answer), so its share is in the figure too and
// the same in every run: compare runs of one machine, not absolute values.

const benchConns = 64

// benchServer serves /ws for the benchmarks: hello, then serve(ws, conn)
// with the connection's number (the token "bench:<n>"); the history of
// every chat is empty.
func benchServer(b *testing.B, serve func(ws *websocket.Conn, n int)) *httptest.Server {
	b.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", func(w http.ResponseWriter, r *http.Request) {
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer bench:")
		n, err := strconv.Atoi(tok)
		if err != nil {
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		hello := protocol.Hello{Type: protocol.TypeHello, UserID: fmt.Sprintf("u%d", n), Device: "default", ConnectionID: tok,
			Limits: protocol.Limits{MaxBodyBytes: 4096, MaxInFlightSends: 64}}
		if ws.Write(r.Context(), websocket.MessageText, protocol.Encode(hello)) != nil {
			return
		}
		serve(ws, n)
	})
	mux.HandleFunc("GET /api/chats/{id}/messages", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"messages":[],"hasMore":false}`))
	})
	srv := httptest.NewServer(mux)
	b.Cleanup(srv.Close)
	return srv
}

// benchClients dials benchConns clients; onMessage, when set, is each
// client's OnMessage.
func benchClients(b *testing.B, srv *httptest.Server, onMessage func(protocol.Message)) []*Client {
	b.Helper()
	var cs []*Client
	for i := range benchConns {
		c, err := Dial(context.Background(), Config{URL: srv.URL, Token: fmt.Sprintf("bench:%d", i), OnMessage: onMessage,
			Chats: func(context.Context) ([]string, error) { return nil, nil }, DisableRateLimit: true})
		if err != nil {
			b.Fatal(err)
		}
		cs = append(cs, c)
	}
	b.Cleanup(func() {
		for _, c := range cs {
			_ = c.Close()
		}
	})
	return cs
}

// BenchmarkReceive: the server pushes message frames to benchConns
// clients, each frame once its previous one was acknowledged; a frame
// costs the client a read, a decode, the dedupe, OnMessage and an ack.
func BenchmarkReceive(b *testing.B) {
	var start sync.WaitGroup
	start.Add(1)
	var per atomic.Int64
	var got atomic.Int64
	done := make(chan struct{})
	srv := benchServer(b, func(ws *websocket.Conn, n int) {
		start.Wait()
		ctx := context.Background()
		m := protocol.Message{Type: protocol.TypeMessage, CorrelationID: "01JBENCHCORRELATION0000000", ChatID: fmt.Sprintf("chat-%d", n%8),
			SenderID: "sender", Body: strings.Repeat("x", 64), SentAt: time.Now().UTC()}
		for i := range per.Load() {
			m.MessageID = fmt.Sprintf("01JBENCH%06d%012d", n, i)
			if ws.Write(ctx, websocket.MessageText, protocol.Encode(&m)) != nil {
				return
			}
			if _, _, err := ws.Read(ctx); err != nil { // the ack
				return
			}
		}
	})
	benchClients(b, srv, func(protocol.Message) {
		if got.Add(1) == per.Load()*benchConns {
			close(done)
		}
	})
	per.Store(int64(max(b.N/benchConns, 1)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := testenv.CPUPer(b, "frame")
	start.Done()
	<-done
	b.StopTimer()
	cpu(int(per.Load() * benchConns))
}

// BenchmarkSend: benchConns clients send, one message at a time each, and
// the server answers every send accepted.
func BenchmarkSend(b *testing.B) {
	srv := benchServer(b, func(ws *websocket.Conn, n int) {
		ctx := context.Background()
		for i := 0; ; i++ {
			_, data, err := ws.Read(ctx)
			if err != nil {
				return
			}
			f, err := protocol.DecodeClient(data, 4096)
			if err != nil || f.Send == nil {
				continue
			}
			a := protocol.Accepted{Type: protocol.TypeAccepted, CorrelationID: f.Send.CorrelationID,
				MessageID: fmt.Sprintf("01JBENCH%06d%012d", n, i), ChatID: f.Send.ChatID, SentAt: time.Now().UTC()}
			if ws.Write(ctx, websocket.MessageText, protocol.Encode(a)) != nil {
				return
			}
		}
	})
	cs := benchClients(b, srv, nil)
	per := max(b.N/benchConns, 1)
	body := strings.Repeat("x", 64)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := testenv.CPUPer(b, "send")
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range per {
				if _, err := c.SendWithID(context.Background(), "chat", fmt.Sprintf("c%d-%d", i, j), body); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	cpu(per * benchConns)
}
