// Package slogx holds what the project adds to log/slog: a warning that is
// logged at most once per interval however often it happens, for failures
// that repeat per message or per connection while a dependency is away (a
// Redis outage must not turn into thousands of log lines a second).
package slogx
