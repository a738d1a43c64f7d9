//go:build !unix

package postgres

import "github.com/jackc/pgx/v5"

// hasPending reports false where recv(2) with MSG_PEEK is not available:
// there a dead idle connection is found by pgxpool's own ping (after a
// second idle) or by the statement that fails on it (see peek_unix.go).
func hasPending(*pgx.Conn) bool { return false }
