package testenv

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kafka returns seed broker addresses and an outbox topic name unique to
// the test. With TETRA_TEST_KAFKA (comma-separated host:port) it uses that
// cluster (Kafka or Redpanda, with transactions enabled) and deletes the
// topic and its cursor topic when the test ends; otherwise it starts an
// in-process Kafka-protocol broker (kfake, three brokers on loopback TCP)
// for the test alone.
func Kafka(t testing.TB) (seeds []string, topic string) {
	t.Helper()
	topic = "tetra-test-" + randomSuffix()
	if v := env("TETRA_TEST_KAFKA", ""); v != "" {
		seeds = strings.Split(v, ",")
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
		if err != nil {
			t.Fatalf("testenv: TETRA_TEST_KAFKA=%q: %v", v, err)
		}
		adm := kadm.NewClient(cl)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := adm.ListBrokers(ctx); err != nil {
			cl.Close()
			Unavailable(t, "Kafka at "+v, "Start a broker with transactions enabled or unset TETRA_TEST_KAFKA to use the in-process broker.", err)
		}
		t.Cleanup(func() {
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := adm.DeleteTopics(ctx, topic, topic+"-cursor"); err != nil {
				t.Logf("testenv: delete topic %s: %v", topic, err)
			}
		})
		return seeds, topic
	}
	return NewFakeKafka(t).Seeds(), topic
}

// KafkaURL is Kafka as a --outbox URL: kafka://seeds/topic.
func KafkaURL(t testing.TB) string {
	t.Helper()
	seeds, topic := Kafka(t)
	return "kafka://" + strings.Join(seeds, ",") + "/" + topic
}

// FakeKafka is an in-process Kafka-protocol cluster (kfake) on loopback
// TCP for fault tests: Cut makes it unreachable (every connection dropped,
// new ones closed at once), Restore lets connections through again, and
// Restart stops it and starts it again on the same ports from its data
// directory. It stops when the test ends.
type FakeKafka struct {
	t     testing.TB
	dir   string
	ports []int

	mu    sync.Mutex
	c     *kfake.Cluster
	cut   bool
	conns map[net.Conn]struct{}
}

// NewFakeKafka starts a three-broker cluster persisting to a temporary
// directory.
func NewFakeKafka(t testing.TB) *FakeKafka {
	t.Helper()
	f := &FakeKafka{t: t, dir: t.TempDir(), conns: map[net.Conn]struct{}{}}
	if err := f.start(kfake.NumBrokers(3)); err != nil {
		t.Fatalf("testenv: start kfake: %v", err)
	}
	f.mu.Lock()
	for _, a := range f.c.ListenAddrs() {
		_, p, _ := net.SplitHostPort(a)
		var port int
		fmt.Sscan(p, &port)
		f.ports = append(f.ports, port)
	}
	f.mu.Unlock()
	t.Cleanup(f.stop)
	return f
}

func (f *FakeKafka) start(opts ...kfake.Opt) error {
	opts = append(opts, kfake.DataDir(f.dir), kfake.ListenFn(f.listen))
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.c = c
	f.mu.Unlock()
	return nil
}

func (f *FakeKafka) stop() {
	f.mu.Lock()
	c := f.c
	f.c = nil
	f.dropLocked()
	f.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// Seeds returns the brokers' addresses.
func (f *FakeKafka) Seeds() []string {
	var out []string
	for _, p := range f.ports {
		out = append(out, fmt.Sprintf("127.0.0.1:%d", p))
	}
	return out
}

// ControlKey intercepts the next request with key (kmsg.EndTxn, ...); see
// kfake.Cluster.ControlKey. fn returns handled false to let the request
// through untouched (and stay installed).
func (f *FakeKafka) ControlKey(key int16, fn func(kmsg.Request) (kmsg.Response, error, bool)) {
	f.mu.Lock()
	c := f.c
	f.mu.Unlock()
	c.ControlKey(key, fn)
}

// Cut drops every connection and refuses new ones until Restore.
func (f *FakeKafka) Cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut = true
	f.dropLocked()
}

// Restore lets connections through again.
func (f *FakeKafka) Restore() {
	f.mu.Lock()
	f.cut = false
	f.mu.Unlock()
}

// Restart stops the cluster (its state is flushed to the data directory)
// and starts it again on the same ports.
func (f *FakeKafka) Restart() {
	f.t.Helper()
	f.stop()
	var err error
	for range 50 { // the ports may take a moment to free
		if err = f.start(kfake.Ports(f.ports...)); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	f.t.Fatalf("testenv: restart kfake on ports %v: %v", f.ports, err)
}

func (f *FakeKafka) dropLocked() {
	for c := range f.conns {
		c.Close()
	}
	f.conns = map[net.Conn]struct{}{}
}

// listen is kfake's listener: loopback, with Cut applied to it.
func (f *FakeKafka) listen(network, address string) (net.Listener, error) {
	if strings.HasPrefix(address, ":") {
		address = "127.0.0.1" + address
	}
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	return &cutListener{Listener: ln, f: f}, nil
}

type cutListener struct {
	net.Listener
	f *FakeKafka
}

func (l *cutListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.f.mu.Lock()
		if l.f.cut {
			l.f.mu.Unlock()
			c.Close()
			continue
		}
		l.f.conns[c] = struct{}{}
		l.f.mu.Unlock()
		return &trackedConn{Conn: c, f: l.f}, nil
	}
}

type trackedConn struct {
	net.Conn
	f    *FakeKafka
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.f.mu.Lock()
		delete(c.f.conns, c.Conn)
		c.f.mu.Unlock()
	})
	return c.Conn.Close()
}
