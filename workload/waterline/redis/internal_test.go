package redis

import "testing"

// The index refuses servers whose scripts would fail half-way (ZADD ...
// LT is Redis 6.2).
func TestCheckVersion(t *testing.T) {
	for _, tc := range []struct {
		info string
		ok   bool
	}{
		{"# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", true},
		{"redis_version:6.2.0\r\n", true},
		{"redis_version:6.2.14\r\n", true},
		{"redis_version:10.0.0\r\n", true},
		{"redis_version:8.2.1\r\n", true},
		{"redis_version:6.0.16\r\n", false},
		{"redis_version:5.0.7\r\n", false},
		{"redis_version:garbage\r\n", false},
		{"redis_mode:standalone\r\n", false}, // no version at all
	} {
		if err := checkVersion(tc.info); (err == nil) != tc.ok {
			t.Errorf("checkVersion(%q) = %v, want ok %v", tc.info, err, tc.ok)
		}
	}
}
