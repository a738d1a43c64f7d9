package redisinfo_test

import (
	"context"
	"net"
	"regexp"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tetra-messenger/tetra/internal/operator/redisid"
	"github.com/tetra-messenger/tetra/internal/redisinfo"
	"github.com/tetra-messenger/tetra/internal/testenv"
	redisidx "github.com/tetra-messenger/tetra/workload/waterline/redis"
)

var hex40 = regexp.MustCompile(`^[0-9a-f]{40}$`)

// info reads INFO sections from the server at url, as one reply.
func info(t *testing.T, url string, sections ...string) string {
	t.Helper()
	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	text, err := c.Info(ctx, sections...).Result()
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// Parse on the INFO reply of a real redis-server of the test's own (CRLF
// line ends, "# Section" headers): the identity fields are the server's 40
// hex digit IDs, a fresh master has no previous replication ID, and the
// sections read separately give what the whole reply gives.
func TestParseRealInfo(t *testing.T) {
	r := testenv.NewOwnRedis(t)
	all := info(t, r.URL())
	f := redisinfo.Parse(all)
	id := f.Identity()
	if !hex40.MatchString(id.RunID) || !hex40.MatchString(id.MasterReplID) {
		t.Fatalf("identity %+v from INFO:\n%s", id, all)
	}
	if id.MasterReplID2 != redisinfo.NoReplID || f.Role() != "master" {
		t.Errorf("fresh server: master_replid2 %q, role %q; want %s, master", id.MasterReplID2, f.Role(), redisinfo.NoReplID)
	}
	_, port, _ := net.SplitHostPort(r.URL()[len("redis://") : len(r.URL())-len("/0")])
	if f["tcp_port"] != port {
		t.Errorf("tcp_port %q, want %s (a value must lose the line's \\r)", f["tcp_port"], port)
	}
	if f["redis_version"] == "" {
		t.Error("no redis_version")
	}
	if _, ok := f["# Server"]; ok {
		t.Error("a section header was read as a field")
	}
	parts := redisinfo.Parse(info(t, r.URL(), "server") + "\n" + info(t, r.URL(), "replication")).Identity()
	if parts != id {
		t.Errorf("INFO server + replication give %+v, INFO gives %+v", parts, id)
	}
}

// The operator's probe and the pods' waterline index name a server with
// one key: equal for the same server, and both change when it restarts.
func TestOperatorAndIndexAgree(t *testing.T) {
	r := testenv.NewOwnRedis(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	keys := func() (operator, index string) {
		t.Helper()
		id, err := redisid.Prober{Timeout: time.Second}.Probe(ctx, redisid.Target{URL: r.URL()})
		if err != nil {
			t.Fatal(err)
		}
		ix, err := redisidx.New(ctx, redisidx.Config{URL: r.URL(), Prefix: "agree:", Owner: "pod-0"})
		if err != nil {
			t.Fatal(err)
		}
		defer ix.Close()
		key, err := ix.Identity(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return id.Key(), key
	}
	op1, ix1 := keys()
	if op1 != ix1 {
		t.Fatalf("the operator names the server %s, the index %s", op1, ix1)
	}
	r.Kill()
	r.Start()
	op2, ix2 := keys()
	if op2 != ix2 {
		t.Fatalf("after a restart the operator names the server %s, the index %s", op2, ix2)
	}
	if op2 == op1 {
		t.Fatalf("a restarted server kept its key %s", op1)
	}
}

// Parse keeps everything after a value's first colon, skips headers,
// blank and malformed lines, and accepts "\n" as well as "\r\n".
func TestParseLines(t *testing.T) {
	f := redisinfo.Parse("# Server\r\nrun_id:abc\r\n\r\nexecutable:/a:b\nnocolon\n# Replication\nrole:master\n")
	want := map[string]string{"run_id": "abc", "executable": "/a:b", "role": "master"}
	if len(f) != len(want) {
		t.Errorf("fields %v, want %v", f, want)
	}
	for k, v := range want {
		if f[k] != v {
			t.Errorf("%s = %q, want %q", k, f[k], v)
		}
	}
}
