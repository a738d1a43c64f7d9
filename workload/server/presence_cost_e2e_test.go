package server_test

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/server"
)

// redisCalls is the number of commands a Redis server ran, by command
// (INFO commandstats), and in all under "".
func redisCalls(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	info, err := c.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				calls[strings.TrimPrefix(name, "cmdstat_")] = n
				calls[""] += n
			}
		}
	}
	return calls
}

// delta is b - a per command, the commands that did not change left out.
func delta(a, b map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for k, v := range b {
		if v != a[k] {
			d[k] = v - a[k]
		}
	}
	return d
}

// TestFleetPresenceCostPerChange: a presence change costs a few Redis
// commands whatever the number of users who watch the user (PROTOCOL.md
// §7.4; docs/benchmarks.md, "Presence"). Two processes share a redis-server
// of the test's own (so every command it counts is theirs); watchers
// users (400, or TETRA_PRESENCE_WATCHERS) share a direct chat with bob and
// are connected, alternately to each process. bob comes online on one
// process and, once every watcher got the frame, goes offline (a 1 s
// grace); the test counts the commands Redis ran for each change (INFO
// commandstats deltas, the fleet's background commands of an equal quiet
// window subtracted; commands run inside a script count). A presence
// written or published per watcher would cost at least one command per
// watcher: each command's count is held to a tenth of that, the total to
// a quarter.
func TestFleetPresenceCostPerChange(t *testing.T) {
	watchers := 400
	if v := os.Getenv("TETRA_PRESENCE_WATCHERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 10 {
			t.Fatalf("TETRA_PRESENCE_WATCHERS=%q: want an integer of at least 10", v)
		}
		watchers = n
	}
	own := testenv.NewOwnRedis(t)
	fleet := newFleet(t, 2, func(c *server.Config) {
		c.Index, c.IndexPrefix = own.URL(), "pcost:"
		c.PresenceGrace = time.Second
		c.Tuning.PingInterval = time.Minute // thousands of sockets: no ping storm
		c.Tuning.GCInterval = time.Second
		c.Delivery.OwnerTTL = 10 * time.Second // fewer heartbeats: less background to subtract
		c.MaxConns = watchers + 100
	})
	rc := redis.NewClient(&redis.Options{Addr: strings.TrimSuffix(strings.TrimPrefix(own.URL(), "redis://"), "/0")})
	defer rc.Close()

	names := make([]string, watchers)
	for i := range names {
		names[i] = fmt.Sprintf("w%05d", i)
	}
	clients := make([]*wsClient, watchers)
	var wg sync.WaitGroup
	errs := make(chan error, watchers)
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				e := fleet[i%2]
				status, raw := e.call("POST", "/api/chats", e.token(names[i]), map[string]any{"kind": "direct", "members": []string{"bob"}})
				if status != http.StatusCreated && status != http.StatusOK {
					errs <- fmt.Errorf("%s: create direct: %d %s", names[i], status, raw)
					continue
				}
				c, err := e.dialE(names[i], dialOpts{})
				if err != nil {
					errs <- fmt.Errorf("%s: dial: %w", names[i], err)
					continue
				}
				clients[i] = c
			}
		}()
	}
	for i := range watchers {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, c := range clients {
		c.expectNone("a presence frame before bob connects", func(f frame) bool { return f.Type == "presence" && f.UserID == "bob" }, 0)
	}

	// The fleet's own background (heartbeats, GC, refreshes) over a quiet
	// window, to subtract from each change's window.
	quiet := func(d time.Duration) map[string]int64 {
		before := redisCalls(t, rc)
		time.Sleep(d)
		return delta(before, redisCalls(t, rc))
	}
	// The watchers' own presence changes (a script and a PUBLISH each) are
	// applied in order by each process's tracker: wait until they are done.
	for deadline := time.Now().Add(2 * time.Minute); quiet(time.Second)["publish"] > 5; {
		if time.Now().After(deadline) {
			t.Fatal("the watchers' presence changes were still being published after 2 minutes")
		}
	}
	background := quiet(2 * time.Second)
	// net is a change's count of each command, less what the background
	// ran in a window as long; "" is the total.
	measure := func(what string, change func()) (map[string]int64, map[string]int64, time.Duration) {
		before := redisCalls(t, rc)
		start := time.Now()
		change()
		for _, c := range clients {
			c.next(what, isPresence("bob", what == "online"))
		}
		took := time.Since(start)
		raw := delta(before, redisCalls(t, rc))
		net := map[string]int64{}
		for k, v := range raw {
			net[k] = v - int64(float64(background[k])*took.Seconds()/2)
		}
		return net, raw, took
	}
	var bob *wsClient
	online, onRaw, onTook := measure("online", func() { bob = fleet[0].dial("bob", dialOpts{}) })
	offline, offRaw, offTook := measure("offline", func() { bob.close() })
	t.Logf("%d watchers on 2 processes; background per 2 s: %v", watchers, background)
	t.Logf("online (bob's connection's own commands included): %d commands net of background in %v; raw %v", online[""], onTook, onRaw)
	t.Logf("offline (the 1 s grace included): %d commands net of background in %v; raw %v", offline[""], offTook, offRaw)
	// Per watcher would be at least one command per watcher, of one kind
	// or spread over a few: each kind is held to a tenth of the watchers,
	// the total (where the background's noise adds up) to a quarter.
	for what, net := range map[string]map[string]int64{"online": online, "offline": offline} {
		for cmd, n := range net {
			if limit := int64(watchers / 10); cmd != "" && n > limit {
				t.Errorf("going %s cost %d %s commands for %d watchers, want at most %d: per watcher, not per change", what, n, cmd, watchers, limit)
			}
		}
		if limit := int64(watchers / 4); net[""] > limit {
			t.Errorf("going %s cost %d Redis commands for %d watchers, want at most %d: per watcher, not per change", what, net[""], watchers, limit)
		}
	}
}
