package loadgen

import (
	"context"
	"testing"

	"github.com/tetra-messenger/tetra/internal/testenv"
)

// TestKafkaReconcilesWithNothingLost is a short run on SQLite + Kafka (the
// outbox in a topic fed by the relay): every accepted message reaches its
// recipient, and the topic drains (GC deletes records below each
// partition's waterline).
func TestKafkaReconcilesWithNothingLost(t *testing.T) {
	t.Parallel()
	cfg := shortConfig()
	cfg.Server.Outbox = testenv.KafkaURL(t)
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", rep)
	if rep.Accepted < 100 || rep.Lost != 0 || rep.Expected != rep.Accepted {
		t.Fatalf("accepted %d, expected %d, lost %d", rep.Accepted, rep.Expected, rep.Lost)
	}
	if rep.OutboxFinal != 0 {
		t.Fatalf("outbox did not drain: %d records left", rep.OutboxFinal)
	}
}
