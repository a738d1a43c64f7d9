package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	tetrav1 "github.com/tetra-messenger/tetra/api/v1alpha1"
	"github.com/tetra-messenger/tetra/internal/operator/redisid"
	"github.com/tetra-messenger/tetra/internal/redisinfo"
)

// scriptedProber returns the next scripted observation on every probe.
type scriptedProber struct{ script []any } // redisinfo.Identity or error

func (p *scriptedProber) Probe(context.Context, redisid.Target) (redisinfo.Identity, error) {
	next := p.script[0]
	p.script = p.script[1:]
	if err, ok := next.(error); ok {
		return redisinfo.Identity{}, err
	}
	return next.(redisinfo.Identity), nil
}

// TestFailoverNeedsTwoEqualObservations drives observeRedis through a
// scripted sequence of identities and errors, without a cluster.
func TestFailoverNeedsTwoEqualObservations(t *testing.T) {
	a := redisinfo.Identity{RunID: "run-a", MasterReplID: "repl-a", Addr: "r:6379"}
	b := redisinfo.Identity{RunID: "run-a", MasterReplID: "repl-b", Addr: "r:6379"} // a promotion
	c := redisinfo.Identity{RunID: "run-c", MasterReplID: "repl-b", Addr: "r:6379"} // a restart
	several := fmt.Errorf("%w: sentinels disagree", redisid.ErrSeveralMasters)
	none := fmt.Errorf("%w: replica", redisid.ErrNoMaster)

	scheme := runtime.NewScheme()
	if err := tetrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	rec := events.NewFakeRecorder(100)
	prober := &scriptedProber{}
	r := &MessengerReconciler{
		Client: fake.NewClientBuilder().WithScheme(scheme).Build(), APIReader: fake.NewClientBuilder().Build(),
		Recorder: rec, Prober: prober, Now: func() time.Time { return time.Unix(1e9, 0) },
	}
	m := &tetrav1.Messenger{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "chat"},
		Spec: tetrav1.MessengerSpec{Redis: &tetrav1.RedisSpec{}}}

	steps := []struct {
		see       any
		epoch     int64 // status.redis.epoch after the step
		restart   int64 // status.redis.restartEpoch after the step
		degraded  string
		persisted bool
	}{
		{see: a, epoch: 0, persisted: true},             // the baseline
		{see: a, epoch: 0},                              // quiet
		{see: b, epoch: 0},                              // once: wait
		{see: a, epoch: 0},                              // back: a blip, forgotten
		{see: b, epoch: 0},                              // once again
		{see: several, degraded: "RedisSeveralMasters"}, // ambiguity resets the count
		{see: b, epoch: 0},                              // once
		{see: none, degraded: "RedisNoMaster"},          // resets again
		{see: b, epoch: 0},                              // once
		{see: c, epoch: 0},                              // a different change: starts over
		{see: c, epoch: 1, persisted: true},             // twice in a row: act
		{see: c, epoch: 1},                              // settled
	}
	for i, s := range steps {
		prober.script = []any{s.see}
		cond, announce, persisted := r.observeRedis(context.Background(), m, "redis://r:6379")
		if announce != nil {
			if !persisted {
				t.Fatalf("step %d: an announcement without a status to persist", i)
			}
			announce()
		}
		switch {
		case s.degraded != "":
			if cond == nil || cond.Reason != s.degraded || cond.Status != metav1.ConditionTrue {
				t.Fatalf("step %d: condition %+v, want Degraded %s", i, cond, s.degraded)
			}
		case cond != nil:
			t.Fatalf("step %d: unexpected condition %+v", i, cond)
		}
		if persisted != s.persisted {
			t.Fatalf("step %d: persisted=%v, want %v", i, persisted, s.persisted)
		}
		if s.degraded == "" && (m.Status.Redis.Epoch != s.epoch || m.Status.Redis.RestartEpoch != s.restart) {
			t.Fatalf("step %d: status %+v, want epoch %d restart %d", i, m.Status.Redis, s.epoch, s.restart)
		}
	}
	if !m.Status.Redis.Since.Equal(&metav1.Time{Time: time.Unix(1e9, 0)}) || m.Status.Redis.RunID != "run-c" {
		t.Fatalf("status %+v", m.Status.Redis)
	}
	// The rebuild is rebuildPhase's, after the epoch is persisted.
	if m.Status.LastRebuild != nil {
		t.Fatalf("last rebuild %+v", m.Status.LastRebuild)
	}
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	// One failover, announced once, as a restart (c is another process
	// with no history of a's).
	if len(got) != 1 || !strings.Contains(got[0], ReasonRedisFailoverDetected) || !strings.Contains(got[0], "(restart)") {
		t.Fatalf("events %q", got)
	}
}
