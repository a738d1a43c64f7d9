package redis

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// SetLibraryLogger sends go-redis's own log lines (a dial that failed
// after its retries, a pub/sub connection dropped, a Sentinel that
// switched masters) to log at level Warn, with the attribute
// lib=go-redis, instead of go-redis's default: plain text on os.Stderr,
// which breaks a JSON log stream (--log-format json; issue 13, point 7).
// go-redis has one logger per process, so this applies to every client of
// the process; the process's entry point calls it once with its own
// logger. A nil log is ignored.
func SetLibraryLogger(log *slog.Logger) {
	if log == nil {
		return
	}
	goredis.SetLogger(libraryLogger{log})
}

// libraryLogger adapts slog to go-redis's internal.Logging.
type libraryLogger struct{ log *slog.Logger }

func (l libraryLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)), "lib", "go-redis")
}
