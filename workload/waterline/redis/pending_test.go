package redis_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tetra-messenger/tetra/workload/waterline"
	"github.com/tetra-messenger/tetra/workload/waterline/redis"
)

// The pins in Redis follow the pending entries the process keeps, however
// the calls of one client interleave: 8 goroutines send to and acknowledge
// the same 4 clients at random, with Sent, SentMany, Ack and AckMany;
// after them, every client's pin in Redis is the lowest position it has
// pending (absent when none), which is what SafeLine must see.
func TestPinsFollowThePendingEntries(t *testing.T) {
	ctx := t.Context()
	x, cfg := newIndex(t)
	clients := []string{"a", "b", "c", "d"}
	for _, c := range clients {
		if err := x.Connect(ctx, waterline.Client{ID: c}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	pending := map[string]map[string]int64{} // client -> id -> pos
	for _, c := range clients {
		pending[c] = map[string]int64{}
	}
	var next int64
	var wg sync.WaitGroup
	lease := time.Now().Add(time.Hour)
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 300 {
				c := clients[rng.IntN(len(clients))]
				mu.Lock()
				var ids []string
				for id := range pending[c] {
					ids = append(ids, id)
				}
				mu.Unlock()
				switch op := rng.IntN(4); {
				case op < 2 || len(ids) == 0: // a send (of a new entry)
					mu.Lock()
					next++
					id, pos := fmt.Sprint("m", next), next
					mu.Unlock()
					e := []waterline.Entry{{MessageID: id, Pos: pos}}
					var err error
					if op == 0 {
						_, err = x.Sent(ctx, c, e, lease)
					} else {
						err = x.SentMany(ctx, []waterline.SentBatch{{ClientID: c, Entries: e}}, lease)[0]
					}
					if err != nil {
						t.Error(err)
						return
					}
					// Ackable once recorded, as a frame is once sent.
					mu.Lock()
					pending[c][id] = pos
					mu.Unlock()
				default: // an ack of one pending entry, recorded before it is forgotten here
					id := ids[rng.IntN(len(ids))]
					var err error
					if op == 2 {
						_, err = x.Ack(ctx, c, []string{id})
					} else {
						err = x.AckMany(ctx, []waterline.AckBatch{{ClientID: c, MessageIDs: []string{id}}})[0]
					}
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					delete(pending[c], id)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	raw := rawClient(t, cfg.URL)
	lowest := int64(-1)
	for _, c := range clients {
		want, has := int64(0), false
		for _, pos := range pending[c] {
			if !has || pos < want {
				want, has = pos, true
			}
		}
		if has && (lowest < 0 || want < lowest) {
			lowest = want
		}
		got, err := raw.ZScore(ctx, cfg.Prefix+"pins:0", c).Result()
		switch {
		case !has && !errors.Is(err, goredis.Nil):
			t.Errorf("client %s has nothing pending; its pin in Redis is %v, %v, want none", c, got, err)
		case has && (err != nil || int64(got) != want):
			t.Errorf("client %s: pin in Redis %v, %v; want %d, its lowest pending position", c, got, err, want)
		}
	}
	if line, ok, err := x.SafeLine(ctx, 0, primed(t, x)); err != nil || ok != (lowest >= 0) || (ok && line != lowest) {
		t.Errorf("SafeLine = %d %v %v; want %d", line, ok, err, lowest)
	}
}

// A pin a flight could not write (Redis unreachable) is written before
// SafeLine reads a line: while Redis cannot be reached SafeLine fails, and
// once it can, the line counts the pin, though no call moved it since.
func TestSafeLineWritesPinsAFlightLeft(t *testing.T) {
	ctx := t.Context()
	url, prefix := newIndexURL(t)
	parts := strings.SplitN(url, "/", 4) // redis://host:port/db
	target, db := parts[2], "0"
	if len(parts) == 4 && parts[3] != "" {
		db = parts[3]
	}
	px := startProxy(t, target)
	x, err := redis.New(ctx, redis.Config{URL: "redis://" + px.addr() + "/" + db, Prefix: prefix, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if err := x.Connect(ctx, waterline.Client{ID: "c"}); err != nil {
		t.Fatal(err)
	}
	id := primed(t, x)

	px.switchTo("127.0.0.1:1") // nothing listens there
	if _, err := x.Sent(ctx, "c", []waterline.Entry{{MessageID: "m", Pos: 42}}, time.Now().Add(time.Hour)); !errors.Is(err, waterline.ErrUnavailable) {
		t.Fatalf("Sent with Redis unreachable: %v; want ErrUnavailable", err)
	}
	if _, _, err := x.SafeLine(ctx, 0, id); !errors.Is(err, waterline.ErrUnavailable) {
		t.Fatalf("SafeLine with Redis unreachable and a pin unwritten: %v; want ErrUnavailable", err)
	}

	px.switchTo(target)
	line, ok, err := x.SafeLine(ctx, 0, id)
	if err != nil || !ok || line != 42 {
		t.Fatalf("SafeLine once Redis is back = %d %v %v; want 42, the pin of the send it missed", line, ok, err)
	}
}

// newIndexURL returns a test Redis URL and a fresh prefix.
func newIndexURL(t *testing.T) (string, string) {
	t.Helper()
	_, cfg := newIndex(t)
	return cfg.URL, cfg.Prefix
}
