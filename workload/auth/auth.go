package auth

import (
	"crypto/rand"
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

// LoadSecret returns the secret from env (TETRA_JWT_SECRET's value) when it
// is not empty; otherwise it reads dataDir/jwt.secret, creating the directory
// and a new random 32-byte secret when missing.
func LoadSecret(env, dataDir string) ([]byte, error) {
	b, _, err := LoadOrCreateSecret(env, dataDir)
	return b, err
}

// LoadOrCreateSecret is LoadSecret that also reports whether it created a
// new secret file (so a caller can warn that tokens signed with it match
// only servers using the same directory).
func LoadOrCreateSecret(env, dataDir string) (secret []byte, created bool, err error) {
	if env != "" {
		return []byte(env), false, nil
	}
	if dataDir == "" {
		return nil, false, errors.New("auth: no TETRA_JWT_SECRET and no data directory to keep a secret in")
	}
	if _, err := os.Stat(filepath.Join(dataDir, SecretFile)); errors.Is(err, os.ErrNotExist) {
		created = true
	}
	b, err := loadSecret(dataDir)
	return b, created && err == nil, err
}

func loadSecret(dataDir string) ([]byte, error) {
	path := filepath.Join(dataDir, SecretFile)
	b, err := os.ReadFile(path)
	if err == nil {
		s := strings.TrimSpace(string(b))
		if len(s) < MinSecretLen {
			return nil, fmt.Errorf("auth: %s holds a secret shorter than %d bytes", path, MinSecretLen)
		}
		return []byte(s), nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("auth: read %s: %w", path, err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("auth: create data directory %s: %w", dataDir, err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	s := hex.EncodeToString(raw)
	// O_EXCL: if another process created it first, use theirs.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return loadSecret(dataDir)
	}
	if err != nil {
		return nil, fmt.Errorf("auth: create %s: %w", path, err)
	}
	if _, err := f.WriteString(s + "\n"); err != nil {
		f.Close()
		return nil, fmt.Errorf("auth: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return []byte(s), nil
}

// ScopeAdmin is the scope claim of admin tokens: they open the /admin
// endpoints and nothing else; user tokens never open them.
const ScopeAdmin = "admin"

// Claims are the verified claims of a token.
type Claims struct {
	jwt.RegisteredClaims
	Scope string `json:"scope,omitempty"`
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
