package loadgen

import (
	"context"
	"errors"
	"testing"

	"github.com/tetra-messenger/tetra/workload/client"
	"github.com/tetra-messenger/tetra/workload/protocol"
)

// TestRetrySetup: a setup request answered 503 unavailable or 429
// rate_limited is made again, up to setupTries calls; any other error,
// and success, end it at once.
func TestRetrySetup(t *testing.T) {
	unavailable := &client.Error{Status: 503, Code: protocol.CodeUnavailable}
	cases := []struct {
		name      string
		answers   []error // the answer of each call; nil is success
		wantCalls int
		wantErr   bool
	}{
		{"two 503s then created", []error{unavailable, unavailable, nil}, 3, false},
		{"429 then created", []error{&client.Error{Status: 429, Code: protocol.CodeRateLimited}, nil}, 2, false},
		{"invalid is final", []error{&client.Error{Status: 400, Code: protocol.CodeInvalid}}, 1, true},
		{"not the server's answer", []error{errors.New("dial tcp: refused")}, 1, true},
		{"503 every time", []error{unavailable, unavailable, unavailable, unavailable, unavailable, nil}, setupTries, true},
	}
	for _, c := range cases {
		calls := 0
		v, err := retrySetup(context.Background(), func() (int, error) {
			calls++
			if err := c.answers[calls-1]; err != nil {
				return 0, err
			}
			return 7, nil
		})
		if calls != c.wantCalls || (err != nil) != c.wantErr || (err == nil && v != 7) {
			t.Errorf("%s: %d calls, %v, %v; want %d calls, error %v", c.name, calls, v, err, c.wantCalls, c.wantErr)
		}
	}
}
