package text_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tetra-messenger/tetra/workload/text"
)

func TestRules(t *testing.T) {
	for _, tc := range []struct {
		s           string
		valid, user bool
	}{
		{"alice", true, true},
		{"Zoë 🦊", true, true},
		{"", true, false},
		{"a\x00b", false, false},
		{"\xff", false, false},
		{"a\tb", true, false},      // C0: fine in a body, not in a user id
		{"a\u0085b", true, false},  // C1 (NEL)
		{"a\u009fb", true, false},  // C1
		{"a\x7fb", true, false},    // DEL
		{"\u00a0nbsp", true, true}, // not a control character
		{strings.Repeat("x", text.MaxUserBytes), true, true},
		{strings.Repeat("x", text.MaxUserBytes+1), true, false},
	} {
		if got := text.Valid(tc.s); got != tc.valid {
			t.Errorf("Valid(%q) = %v, want %v", tc.s, got, tc.valid)
		}
		if err := text.Check("body", tc.s); (err == nil) != tc.valid || (err != nil && !errors.Is(err, text.ErrInvalid)) {
			t.Errorf("Check(%q) = %v, want valid %v", tc.s, err, tc.valid)
		}
		if err := text.User("user id", tc.s); (err == nil) != tc.user || (err != nil && !errors.Is(err, text.ErrInvalid)) {
			t.Errorf("User(%q) = %v, want valid %v", tc.s, err, tc.user)
		}
	}
	if err := text.ID("chatId", "", 8); err == nil || !strings.Contains(err.Error(), "chatId is required") {
		t.Errorf("ID(empty) = %v", err)
	}
	if err := text.ID("chatId", "123456789", 8); err == nil {
		t.Error("ID over the limit accepted")
	}
	if err := text.ID("chatId", "c\x00", 8); !errors.Is(err, text.ErrInvalid) {
		t.Errorf("ID with NUL = %v", err)
	}
}
