// Command nudge-receiver is an example receiver of tetra's offline nudge
// webhook (docs/nudge.md): it verifies each request's HMAC-SHA256
// signature and timestamp, deduplicates nudges by id (delivery is
// at-least-once) and prints each new nudge as one JSON line, where a real
// application would send the mobile push.
//
//	TETRA_NUDGE_SECRET=... go run ./workload/cmd/nudge-receiver --addr :9090
//	tetra serve --nudge-url http://127.0.0.1:9090/nudge   (same TETRA_NUDGE_SECRET)
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tetra-messenger/tetra/workload/nudge"
)

func main() {
	addr := flag.String("addr", ":9090", "listen address")
	secretFile := flag.String("secret-file", "", "file holding the HMAC secret (default: $TETRA_NUDGE_SECRET)")
	flag.Parse()
	secret, err := loadSecret(*secretFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nudge-receiver:", err)
		os.Exit(2)
	}
	r := newReceiver(secret, os.Stdout)
	mux := http.NewServeMux()
	mux.Handle("POST /nudge", r)
	slog.Info("nudge-receiver listening", "addr", *addr)
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "nudge-receiver:", err)
		os.Exit(1)
	}
}

func loadSecret(file string) ([]byte, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		return []byte(strings.TrimRight(string(b), "\r\n")), err
	}
	if s := os.Getenv("TETRA_NUDGE_SECRET"); s != "" {
		return []byte(s), nil
	}
	return nil, errors.New("set TETRA_NUDGE_SECRET or --secret-file")
}

// receiver verifies, deduplicates and emits nudges.
type receiver struct {
	secret []byte
	out    io.Writer
	// seen remembers nudge ids for dedupeFor; a retry comes within
	// seconds to minutes, so a day is ample. (A fleet of receivers would
	// keep this in a shared store: INSERT ... ON CONFLICT DO NOTHING, or
	// Redis SET NX with a TTL.)
	mu   sync.Mutex
	seen map[string]time.Time
	now  func() time.Time
}

const dedupeFor = 24 * time.Hour

func newReceiver(secret []byte, out io.Writer) *receiver {
	return &receiver{secret: secret, out: out, seen: map[string]time.Time{}, now: time.Now}
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	// 1. Read the raw body (bounded): the signature covers its bytes.
	body, err := io.ReadAll(io.LimitReader(req.Body, 8<<20))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	// 2. Verify before parsing. A 4xx is not retried by tetra, so a
	// receiver with the wrong secret loses those nudges: alert on it.
	if err := nudge.Verify(r.secret, req.Header, body, r.now(), nudge.DefaultTolerance); err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var b nudge.Batch
	if err := json.Unmarshal(body, &b); err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	// 3. Deduplicate by id and act on the new ones. Answer 2xx only once
	// they are safely handed on: any other answer (or none) makes tetra
	// retry the whole batch, and the ids keep the retry harmless.
	now := r.now()
	enc := json.NewEncoder(r.out)
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, at := range r.seen {
		if now.Sub(at) > dedupeFor {
			delete(r.seen, id)
		}
	}
	for _, n := range b.Nudges {
		if _, dup := r.seen[n.ID]; dup {
			continue
		}
		r.seen[n.ID] = now
		if err := enc.Encode(n); err != nil { // here: send the push
			delete(r.seen, n.ID)
			http.Error(w, "emit", http.StatusServiceUnavailable)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}
