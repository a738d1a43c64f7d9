package auth_test

import (
	"errors"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tetra-messenger/tetra/workload/auth"
	"github.com/tetra-messenger/tetra/workload/history"
)

// A token whose sub the stores would refuse is refused here too: the auth
// layer and the stores apply one rule (package text). Before, a sub with a
// C1 control character passed Verify and every store call of that user
// failed with invalid (issue 13, point 2).
func TestVerifyAppliesTheStoresUserRule(t *testing.T) {
	const secret = "test-secret-0123456789abcdef"
	s, err := auth.NewSigner([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"bob\u0085", "bob\u009f", "bob\x00", "bob\x7f", "bob\n"} {
		// Signed with the server's secret, as an application minting its
		// own tokens would (Issue itself refuses such a sub).
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub}).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		if user, err := s.Verify(tok); !errors.Is(err, auth.ErrInvalidToken) {
			t.Errorf("Verify(sub %q) = %q, %v; want ErrInvalidToken", sub, user, err)
		}
		if store := history.CheckUser("user id", sub); store == nil {
			t.Errorf("the stores accept %q: the rules disagree", sub)
		}
		if _, err := s.Issue(sub, 0); err == nil {
			t.Errorf("Issue(%q) minted a token", sub)
		}
	}
	tok, _ := s.Issue("Zoë", 0)
	if user, err := s.Verify(tok); err != nil || user != "Zoë" {
		t.Errorf("Verify(Zoë) = %q, %v", user, err)
	}
}
