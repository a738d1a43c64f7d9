package postgres

import (
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults and limits of Config.
const (
	// DefaultConnectTimeout bounds establishing one connection (dial, TLS,
	// authentication) when Config.ConnectTimeout is zero.
	DefaultConnectTimeout = 10 * time.Second
	// MaxConnectTimeout is the largest Config.ConnectTimeout accepted.
	MaxConnectTimeout = 5 * time.Minute
	// MaxMaxConns is the largest Config.MaxConns accepted.
	MaxMaxConns = 1000
	// DefaultApplicationName is the application_name the store's sessions
	// report in pg_stat_activity, unless the URL sets one.
	DefaultApplicationName = "tetra"
)

// Config configures Open. Build one with DefaultConfig and change fields as
// needed: the zero value of Outbox is false, which a server in SQL mode does
// not want.
type Config struct {
	// URL is the connection string: a postgres:// URL or a key=value DSN,
	// as pgx accepts it (PG* environment variables fill what it leaves
	// out). Required. Errors quote it with the password left out.
	URL string
	// Outbox makes Commit write an outbox row per chat member (SQL mode),
	// kept as one record per message.
	// False stores history only (Kafka mode, where a relay feeds the log
	// from history); the outbox.Log methods then see an empty log.
	// DefaultConfig sets it to true.
	Outbox bool
	// MaxConns caps the connection pool shared by every method. Zero means
	// max(4, GOMAXPROCS); allowed range 0 to MaxMaxConns. A Commit holds one
	// connection for its round trips (one or two: see DB.Commit).
	MaxConns int32
	// ConnectTimeout bounds establishing one connection. Zero means
	// DefaultConnectTimeout; allowed range 0 to MaxConnectTimeout. It
	// replaces a connect_timeout given in the URL.
	ConnectTimeout time.Duration
}

// DefaultConfig returns the configuration for the database at url: outbox
// rows on, the default pool size and connect timeout.
func DefaultConfig(url string) Config {
	return Config{
		URL:            url,
		Outbox:         true,
		ConnectTimeout: DefaultConnectTimeout,
	}
}

// validate checks c and returns it with defaults filled in, together with
// the parsed pool configuration. Errors name the field and the allowed
// values.
func (c Config) validate() (Config, *pgxpool.Config, error) {
	if strings.TrimSpace(c.URL) == "" {
		return c, nil, fmt.Errorf("postgres: Config.URL is required (for example postgres://user@host:5432/db)")
	}
	if c.MaxConns < 0 || c.MaxConns > MaxMaxConns {
		return c, nil, fmt.Errorf("postgres: Config.MaxConns %d: want 0 (default) to %d", c.MaxConns, MaxMaxConns)
	}
	if c.MaxConns == 0 {
		c.MaxConns = int32(max(4, runtime.GOMAXPROCS(0)))
	}
	if c.ConnectTimeout < 0 || c.ConnectTimeout > MaxConnectTimeout {
		return c, nil, fmt.Errorf("postgres: Config.ConnectTimeout %v: want 0 (default %v) to %v",
			c.ConnectTimeout, DefaultConnectTimeout, MaxConnectTimeout)
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	// pgx's parse errors quote the connection string with the password
	// masked.
	pc, err := pgxpool.ParseConfig(c.URL)
	if err != nil {
		return c, nil, fmt.Errorf("postgres: Config.URL: %w", err)
	}
	pc.MaxConns = c.MaxConns
	pc.MinConns = 0
	pc.ConnConfig.ConnectTimeout = c.ConnectTimeout
	if _, ok := pc.ConnConfig.RuntimeParams["application_name"]; !ok {
		pc.ConnConfig.RuntimeParams["application_name"] = DefaultApplicationName
	}
	return c, pc, nil
}

// target names the database pc points at for messages: user, host, port
// and database, never the password.
func target(pc *pgxpool.Config) string {
	cc := pc.ConnConfig
	return fmt.Sprintf("%s@%s:%d/%s", cc.User, cc.Host, cc.Port, cc.Database)
}
