package server

import (
	"math"

	"golang.org/x/time/rate"

	"github.com/tetra-messenger/tetra/workload/protocol"
)

// connectRetryMs is the retryAfterMs of a WebSocket upgrade refused for too
// many connections of one user: a slot frees when one of them closes,
// which the server cannot foresee, so it names a short wait.
const connectRetryMs = 1000

// retryAfterMs is how long, in milliseconds (at least 1), until l holds n
// tokens: the retryAfterMs of a rate_limited error (PROTOCOL.md §7.7).
func retryAfterMs(l *rate.Limiter, n int) int64 {
	deficit := float64(n) - l.Tokens()
	per := float64(l.Limit())
	if deficit <= 0 || per <= 0 || math.IsInf(per, 0) {
		return 1
	}
	return max(1, int64(math.Ceil(deficit/per*1000)))
}

// sendErrorRetry is sendError with retryAfterMs (rate_limited answers).
func (c *session) sendErrorRetry(corr, code, msg string, retryMs int64) {
	if corr != "" {
		c.srv.metrics.Refused(code)
	}
	c.send(protocol.ErrorFrame{Type: protocol.TypeError, CorrelationID: corr, Code: code, Message: msg, RetryAfterMs: retryMs})
}
