package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tetra-messenger/tetra/workload/text"
)

// ErrInvalidToken is returned by Verify for every token that must get 401:
// malformed, wrongly signed, wrong algorithm, expired, or without sub.
var ErrInvalidToken = errors.New("auth: invalid token")

// SecretFile is the name of the persisted secret inside the data directory.
const SecretFile = "jwt.secret"

// MinSecretLen is the shortest secret accepted, in bytes.
const MinSecretLen = 16

// MaxUserLen bounds the sub claim, in bytes (text.MaxUserBytes).
const MaxUserLen = text.MaxUserBytes

// Signer mints and verifies HS256 tokens with one secret.
type Signer struct {
	secret []byte
}

// NewSigner returns a Signer for secret (at least MinSecretLen bytes).
func NewSigner(secret []byte) (*Signer, error) {
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("auth: secret must be at least %d bytes, got %d", MinSecretLen, len(secret))
	}
	return &Signer{secret: append([]byte(nil), secret...)}, nil
}

// ErrNoSecret is returned by ReadSecret when TETRA_JWT_SECRET is unset and
// the data directory holds no secret file (yet).
var ErrNoSecret = errors.New("auth: no token secret")

// LoadSecret returns the secret from env (TETRA_JWT_SECRET's value) when it
// is not empty; otherwise it reads dataDir/jwt.secret, creating the directory
// and a new random 32-byte secret (64 hex characters) when the file is
// missing or empty. The server calls it once it holds the data directory's
// lock (see server.New).
//
// The file is created atomically: the secret is written to a temporary file
// in dataDir, fsynced, linked to jwt.secret (which fails, without
// replacing anything, if another process created it first: then theirs is
// read and used) and the directory fsynced. A crash leaves either no
// jwt.secret or a complete one, never an empty file; a temporary file left
// by a crash (jwt.secret.tmp-*) is harmless. A jwt.secret that is empty or
// only whitespace (what an older version could leave after a crash; nothing
// can have been signed with it) is replaced the same way, with a rename.
// Errors: a secret file shorter than MinSecretLen, or I/O.
func LoadSecret(env, dataDir string) ([]byte, error) {
	if env != "" {
		return []byte(env), nil
	}
	if dataDir == "" {
		return nil, errors.New("auth: no TETRA_JWT_SECRET and no data directory to keep a secret in")
	}
	b, err := ReadSecret("", dataDir)
	if !errors.Is(err, ErrNoSecret) {
		return b, err
	}
	return createSecret(dataDir)
}

// ReadSecret is LoadSecret that never creates a secret: without
// TETRA_JWT_SECRET and without dataDir/jwt.secret (or with an empty one) it
// fails with an error wrapping ErrNoSecret, which says how to get one. It
// is what `tetra token` uses, so it never mints a token with a fresh secret
// no server accepts (issue 24, point 6).
func ReadSecret(env, dataDir string) ([]byte, error) {
	if env != "" {
		return []byte(env), nil
	}
	path := filepath.Join(dataDir, SecretFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) || (err == nil && strings.TrimSpace(string(b)) == "") {
		return nil, fmt.Errorf("%w: TETRA_JWT_SECRET is unset and %s does not exist or is empty; start the server once with --data %s (it creates the secret there), or set TETRA_JWT_SECRET to the servers' secret", ErrNoSecret, path, dataDir)
	}
	if err != nil {
		return nil, fmt.Errorf("auth: read %s: %w", path, err)
	}
	s := strings.TrimSpace(string(b))
	if len(s) < MinSecretLen {
		return nil, fmt.Errorf("auth: %s holds a secret shorter than %d bytes", path, MinSecretLen)
	}
	return []byte(s), nil
}

// createSecret writes a new secret to dataDir/jwt.secret atomically (see
// LoadSecret) and returns the secret in the file afterwards (another
// process's, if it won).
func createSecret(dataDir string) ([]byte, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("auth: create data directory %s: %w", dataDir, err)
	}
	path := filepath.Join(dataDir, SecretFile)
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	s := hex.EncodeToString(raw)
	f, err := os.CreateTemp(dataDir, SecretFile+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("auth: create a temporary file in %s: %w", dataDir, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the link (or a failure) it is not needed
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, fmt.Errorf("auth: chmod %s: %w", tmp, err)
	}
	if _, err := f.WriteString(s + "\n"); err != nil {
		f.Close()
		return nil, fmt.Errorf("auth: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("auth: fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("auth: close %s: %w", tmp, err)
	}
	// Link refuses to replace an existing file: if another process
	// created jwt.secret meanwhile, use theirs. An existing empty file
	// (an older version's crash) is replaced by a rename.
	err = os.Link(tmp, path)
	if errors.Is(err, os.ErrExist) {
		if b, rerr := ReadSecret("", dataDir); !errors.Is(rerr, ErrNoSecret) {
			return b, rerr
		}
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return nil, fmt.Errorf("auth: create %s: %w", path, err)
	}
	if err := syncDir(dataDir); err != nil {
		return nil, err
	}
	return ReadSecret("", dataDir)
}

// syncDir fsyncs directory dir, so an entry just linked or renamed in it
// survives a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("auth: open %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("auth: fsync %s: %w", dir, err)
	}
	return nil
}

// ScopeAdmin is the scope claim of admin tokens: they open the /admin
// endpoints and nothing else; user tokens never open them.
const ScopeAdmin = "admin"

// Claims are the verified claims of a token.
type Claims struct {
	jwt.RegisteredClaims
	Scope string `json:"scope,omitempty"`
}

// fingerprintLabel is the fixed message Fingerprint authenticates.
const fingerprintLabel = "tetra fleet identity: token secret fingerprint v1"

// Fingerprint names the secret without revealing it: "hmac-sha256:" and the
// first 8 bytes, in hex, of HMAC-SHA256 keyed with the secret over a fixed
// label. Equal fingerprints mean (but for a 2^-64 chance) equal secrets; a
// fingerprint tells no more of the secret than any token signed with it
// (both are HMACs under it). The server records it as part of its fleet's
// identity (issue 24, point 1).
func (s *Signer) Fingerprint() string {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte(fingerprintLabel))
	return "hmac-sha256:" + hex.EncodeToString(m.Sum(nil)[:8])
}

// Issue mints a user token for user. ttl <= 0 mints a token without exp.
func (s *Signer) Issue(user string, ttl time.Duration) (string, error) {
	return s.issue(user, "", ttl)
}

// IssueAdmin mints an admin token (scope "admin", sub "admin").
func (s *Signer) IssueAdmin(ttl time.Duration) (string, error) {
	return s.issue("admin", ScopeAdmin, ttl)
}

func (s *Signer) issue(user, scope string, ttl time.Duration) (string, error) {
	if err := ValidUser(user); err != nil {
		return "", err
	}
	claims := jwt.MapClaims{"sub": user, "iat": time.Now().Unix()}
	if scope != "" {
		claims["scope"] = scope
	}
	if ttl > 0 {
		claims["exp"] = time.Now().Add(ttl).Unix()
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(s.secret)
}

// Verify checks a user token and returns its sub. Admin tokens are refused
// here. Every failure wraps ErrInvalidToken.
func (s *Signer) Verify(token string) (string, error) {
	user, _, err := s.VerifyExpiry(token)
	return user, err
}

// VerifyExpiry is Verify that also returns the token's exp claim (second
// precision, UTC), or the zero time when the token has none: an open
// WebSocket is closed when it passes (PROTOCOL.md §1, close 4005). A token
// whose exp has passed fails like any invalid token.
func (s *Signer) VerifyExpiry(token string) (user string, exp time.Time, err error) {
	c, err := s.parse(token)
	if err != nil {
		return "", time.Time{}, err
	}
	if c.Scope != "" {
		return "", time.Time{}, fmt.Errorf("%w: not a user token", ErrInvalidToken)
	}
	if c.ExpiresAt != nil {
		exp = c.ExpiresAt.UTC()
	}
	return c.Subject, exp, nil
}

// VerifyAdmin checks an admin token. Every failure wraps ErrInvalidToken.
func (s *Signer) VerifyAdmin(token string) error {
	c, err := s.parse(token)
	if err != nil {
		return err
	}
	if c.Scope != ScopeAdmin {
		return fmt.Errorf("%w: not an admin token", ErrInvalidToken)
	}
	return nil
}

func (s *Signer) parse(token string) (*Claims, error) {
	if token == "" || len(token) > 4096 {
		return nil, fmt.Errorf("%w: missing or oversized", ErrInvalidToken)
	}
	var claims Claims
	// exp is optional (PROTOCOL.md §1) and checked by the parser when present.
	_, err := jwt.ParseWithClaims(token, &claims, func(*jwt.Token) (any, error) { return s.secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	if err := ValidUser(claims.Subject); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	return &claims, nil
}

// ValidUser checks a user id: 1..MaxUserLen bytes of UTF-8 without control
// characters (C0, DEL, C1) and so without NUL. It is text.User, the rule the
// stores apply too (PROTOCOL.md §3), so a token's sub that passes here is
// never refused by a store. Errors wrap text.ErrInvalid.
func ValidUser(user string) error { return text.User("user id", user) }
