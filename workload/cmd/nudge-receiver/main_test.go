package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/nudge"
)

func post(t *testing.T, url string, secret []byte, body []byte, ts int64) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/nudge", bytes.NewReader(body))
	req.Header.Set(nudge.HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(nudge.HeaderSignature, nudge.Sign(secret, ts, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestReceiverVerifiesAndDedupes(t *testing.T) {
	secret := []byte("0123456789abcdef-example")
	var out bytes.Buffer
	r := newReceiver(secret, &out)
	mux := http.NewServeMux()
	mux.Handle("POST /nudge", r)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	b, _ := json.Marshal(nudge.Batch{Nudges: []nudge.Item{
		{ID: nudge.ID("m1", "bob"), MessageID: "m1", Recipient: "bob", Reason: "offline"},
		{ID: nudge.ID("m2", "bob"), MessageID: "m2", Recipient: "bob", Reason: "offline"},
	}})
	now := time.Now().Unix()
	if s := post(t, srv.URL, secret, b, now); s != http.StatusNoContent {
		t.Fatalf("status %d", s)
	}
	if s := post(t, srv.URL, secret, b, now); s != http.StatusNoContent { // a retry
		t.Fatalf("retry status %d", s)
	}
	if n := strings.Count(out.String(), "\n"); n != 2 {
		t.Errorf("%d nudges emitted, want 2 (the retry deduplicated):\n%s", n, out.String())
	}
	if s := post(t, srv.URL, []byte("wrong-secret-0123456"), b, now); s != http.StatusUnauthorized {
		t.Errorf("wrong secret: status %d, want 401", s)
	}
	if s := post(t, srv.URL, secret, b, now-3600); s != http.StatusUnauthorized {
		t.Errorf("an hour-old timestamp: status %d, want 401", s)
	}
}
