package nudge

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers of a webhook request.
const (
	// HeaderTimestamp carries the request's Unix time in seconds, as
	// signed.
	HeaderTimestamp = "Tetra-Nudge-Timestamp"
	// HeaderSignature carries "v1=" and the lowercase hex HMAC-SHA256,
	// keyed by the secret, of the timestamp, a ".", and the raw body.
	HeaderSignature = "Tetra-Nudge-Signature"
)

// DefaultTolerance is how old a request's timestamp Verify accepts by
// default: a signed request replayed later than this is refused.
const DefaultTolerance = 5 * time.Minute

// Errors of Verify.
var (
	ErrNoSignature  = errors.New("nudge: missing signature or timestamp header")
	ErrBadSignature = errors.New("nudge: signature does not match")
	ErrStale        = errors.New("nudge: timestamp outside the tolerance")
)

// Sign returns the HeaderSignature value for body sent at unix seconds ts.
func Sign(secret []byte, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(strconv.FormatInt(ts, 10)))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify checks a webhook request's headers against its raw body: the
// signature must match (compared in constant time) and the timestamp must
// be within tolerance of now (tolerance <= 0: DefaultTolerance). A receiver
// calls it before it parses the body.
func Verify(secret []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	tsText, sig := h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if tsText == "" || sig == "" {
		return ErrNoSignature
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: timestamp %q", ErrNoSignature, tsText)
	}
	want := Sign(secret, ts, body)
	ok := false
	// A header may list several signatures (a secret rotation).
	for _, s := range strings.Split(sig, ",") {
		if hmac.Equal([]byte(strings.TrimSpace(s)), []byte(want)) {
			ok = true
		}
	}
	if !ok {
		return ErrBadSignature
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %v", ErrStale, d.Round(time.Second))
	}
	return nil
}

// ID is the nudge id of (messageID, recipient): stable across retries,
// reasons and processes, so a receiver deduplicates by it. It is the first
// 16 bytes, in hex, of SHA-256(messageID, 0x00, recipient).
func ID(messageID, recipient string) string {
	h := sha256.New()
	h.Write([]byte(messageID))
	h.Write([]byte{0})
	h.Write([]byte(recipient))
	return hex.EncodeToString(h.Sum(nil)[:16])
}
