package fleet_test

import (
	"os"
	"strings"
	"testing"
	"time"
)

// A pod restarted in place (SIGKILL, then the same command with the same
// --index-owner, as the kubelet does) serves again at once, not after the
// owner TTL: it proves its predecessor dead (the PostgreSQL session lock
// on the owner name, held by every process for its life, is free) and
// takes the owner record over. Before, it waited out its own dead
// predecessor's record, the owner TTL (30 s by default) (issue 13, point 6).
// A live process with the same owner name is still refused
// (workload/server TestFleetRefusesADuplicateOwner).
func TestFleetRestartInPlaceTakesOverAtOnce(t *testing.T) {
	t.Parallel()
	const ttl = 30 * time.Second
	f := newFleet(t, 1, "--owner-ttl", ttl.String())
	p := f.procs[0]
	p.kill()
	start := time.Now()
	p.start(p.bin, p.args) // returns once /healthz answers: the server listens only after its index owner is held
	took := time.Since(start)
	t.Logf("restarted in place: serving %v after the start", took.Round(time.Millisecond))
	if took > ttl/2 {
		t.Errorf("the restarted process served after %v, want well within the owner TTL %v", took, ttl)
	}
	b, _ := os.ReadFile(p.logPath)
	if strings.Contains(string(b), "waiting up to the owner TTL") {
		t.Errorf("the restarted process waited for its own dead predecessor's owner record")
	}
}
