package auth_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/auth"
)

const fuzzSecret = "fuzz-secret-0123456789abcdef"

// hs256 signs header.payload with key, the way a forger with the key would.
func hs256(key, signingInput string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(signingInput))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// signedWithSecret reports whether token is three dot-separated parts whose
// header names alg HS256 and whose signature is the HMAC-SHA256 of the first
// two parts under the secret: the only tokens Verify may accept.
func signedWithSecret(token string) bool {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return false
	}
	hdr, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return false
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if json.Unmarshal(hdr, &h) != nil || h.Alg != "HS256" {
		return false
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return false
	}
	want, _ := base64.RawURLEncoding.DecodeString(hs256(fuzzSecret, parts[0]+"."+parts[1]))
	return hmac.Equal(sig, want)
}

// FuzzVerify: Verify and VerifyAdmin never panic, every failure wraps
// ErrInvalidToken, and nothing is accepted unless it is signed HS256 with
// the server's secret (alg none, other algorithms, other keys, tampered
// payloads: all refused).
func FuzzVerify(f *testing.F) {
	s, err := auth.NewSigner([]byte(fuzzSecret))
	if err != nil {
		f.Fatal(err)
	}
	good, _ := s.Issue("alice", time.Hour)
	admin, _ := s.IssueAdmin(time.Hour)
	other, _ := auth.NewSigner([]byte("another-secret-0123456789"))
	foreign, _ := other.Issue("alice", time.Hour)
	enc := func(v any) string { b, _ := json.Marshal(v); return base64.RawURLEncoding.EncodeToString(b) }
	none := enc(map[string]string{"alg": "none", "typ": "JWT"}) + "." + enc(map[string]any{"sub": "alice"}) + "."
	hs512 := enc(map[string]string{"alg": "HS512", "typ": "JWT"}) + "." + enc(map[string]any{"sub": "alice"})
	hs512 += "." + hs256(fuzzSecret, hs512) // HS256 MAC under an HS512 header
	expired := enc(map[string]string{"alg": "HS256", "typ": "JWT"}) + "." + enc(map[string]any{"sub": "alice", "exp": 1})
	expired += "." + hs256(fuzzSecret, expired)
	nosub := enc(map[string]string{"alg": "HS256", "typ": "JWT"}) + "." + enc(map[string]any{"iat": 1})
	nosub += "." + hs256(fuzzSecret, nosub)
	parts := strings.Split(good, ".")
	tampered := parts[0] + "." + enc(map[string]any{"sub": "mallory"}) + "." + parts[2]
	for _, seed := range []string{good, admin, foreign, none, hs512, expired, nosub, tampered, "", ".", "..", "a.b.c",
		"Bearer " + good, good + ".", strings.Repeat("A", 5000), parts[0] + "." + parts[1] + ".", "\x00\xff"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, token string) {
		user, err := s.Verify(token)
		if err != nil {
			if !errors.Is(err, auth.ErrInvalidToken) {
				t.Fatalf("Verify error does not wrap ErrInvalidToken: %v", err)
			}
			if user != "" {
				t.Fatalf("Verify returned user %q with an error", user)
			}
		} else {
			if !signedWithSecret(token) {
				t.Fatalf("Verify accepted a token not signed HS256 with the secret: %q", token)
			}
			if auth.ValidUser(user) != nil {
				t.Fatalf("Verify accepted an invalid sub %q", user)
			}
		}
		if err := s.VerifyAdmin(token); err == nil {
			if !signedWithSecret(token) {
				t.Fatalf("VerifyAdmin accepted a token not signed HS256 with the secret: %q", token)
			}
		} else if !errors.Is(err, auth.ErrInvalidToken) {
			t.Fatalf("VerifyAdmin error does not wrap ErrInvalidToken: %v", err)
		}
	})
}

// The fixed cases the fuzz target's property rests on, checked on every run.
func TestVerifyRefusesForgeries(t *testing.T) {
	s, _ := auth.NewSigner([]byte(fuzzSecret))
	enc := func(v any) string { b, _ := json.Marshal(v); return base64.RawURLEncoding.EncodeToString(b) }
	good, _ := s.Issue("alice", time.Hour)
	if u, err := s.Verify(good); err != nil || u != "alice" {
		t.Fatalf("good token: %q %v", u, err)
	}
	none := enc(map[string]string{"alg": "none"}) + "." + enc(map[string]any{"sub": "alice"}) + "."
	hs384 := enc(map[string]string{"alg": "HS384"}) + "." + enc(map[string]any{"sub": "alice"})
	hs384 += "." + hs256(fuzzSecret, hs384)
	expired := enc(map[string]string{"alg": "HS256"}) + "." + enc(map[string]any{"sub": "alice", "exp": 1})
	expired += "." + hs256(fuzzSecret, expired)
	wrongKey := enc(map[string]string{"alg": "HS256"}) + "." + enc(map[string]any{"sub": "alice"})
	wrongKey += "." + hs256("not-the-secret-xxxxxxxx", wrongKey)
	admin, _ := s.IssueAdmin(time.Hour)
	for name, tok := range map[string]string{"alg none": none, "HS384 header": hs384, "expired": expired, "wrong key": wrongKey, "admin as user": admin} {
		if u, err := s.Verify(tok); err == nil || !errors.Is(err, auth.ErrInvalidToken) {
			t.Errorf("%s: accepted as %q (err %v)", name, u, err)
		}
	}
}
