package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Keys are the names of the tuning settings, as files in a mounted
// ConfigMap directory (one file per key) and as rendered by the operator.
// Durations use Go syntax ("10s", "26h"); counts are decimal integers.
var Keys = []string{
	"lease", "maxDeliveryAttempts", "maxPending", "pendingTimeout", "reconnectGrace",
	"pingInterval", "pingTimeout", "gcGrace", "gcInterval",
	"outboxRetention", "historyRetention", "pollInterval", "pollBatch",
	"maxBodyBytes", "maxInFlightSends", "sendsPerSecond",
}

func (t *Tuning) fields() map[string]any {
	return map[string]any{
		"lease": &t.Lease, "maxDeliveryAttempts": &t.MaxDeliveryAttempts, "maxPending": &t.MaxPending,
		"pendingTimeout": &t.PendingTimeout,
		"reconnectGrace": &t.ReconnectGrace, "pingInterval": &t.PingInterval, "pingTimeout": &t.PingTimeout,
		"gcGrace": &t.GCGrace, "gcInterval": &t.GCInterval, "outboxRetention": &t.OutboxRetention,
		"historyRetention": &t.HistoryRetention, "pollInterval": &t.PollInterval, "pollBatch": &t.PollBatch,
		"maxBodyBytes": &t.MaxBodyBytes, "maxInFlightSends": &t.MaxInFlightSends, "sendsPerSecond": &t.SendsPerSecond,
	}
}

// Set parses value into the setting named key. Unknown keys and malformed
// values are errors naming the key.
func (t *Tuning) Set(key, value string) error {
	f, ok := t.fields()[key]
	if !ok {
		return fmt.Errorf("unknown tuning key %q (known: %s)", key, strings.Join(Keys, ", "))
	}
	value = strings.TrimSpace(value)
	switch p := f.(type) {
	case *time.Duration:
		d, err := time.ParseDuration(value)
		if err != nil {
			return fmt.Errorf("%s: %q is not a duration like 10s or 26h", key, value)
		}
		*p = d
	case *int:
		n, err := strconv.Atoi(value)
		if err != nil {
			return fmt.Errorf("%s: %q is not an integer", key, value)
		}
		*p = n
	}
	return nil
}

// Render returns every setting as key -> text, the inverse of Set.
func (t Tuning) Render() map[string]string {
	out := make(map[string]string, len(Keys))
	for k, f := range t.fields() {
		switch p := f.(type) {
		case *time.Duration:
			out[k] = p.String()
		case *int:
			out[k] = strconv.Itoa(*p)
		}
	}
	return out
}

// LoadDir reads a mounted ConfigMap directory: each regular file whose name
// is a key overrides that setting of base; hidden entries (the ..data
// machinery of Kubernetes volumes) are ignored, and so are unknown names, so
// a newer operator can add keys. The result is validated.
func LoadDir(dir string, base Tuning) (Tuning, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return base, fmt.Errorf("config: read %s: %w", dir, err)
	}
	t := base
	known := map[string]bool{}
	for _, k := range Keys {
		known[k] = true
	}
	var errs []error
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, name := range names {
		if strings.HasPrefix(name, ".") || !known[name] {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name)) // follows the ..data symlinks
		if err != nil {
			errs = append(errs, fmt.Errorf("config: read %s: %w", name, err))
			continue
		}
		if err := t.Set(name, string(b)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return base, err
	}
	if err := t.Validate(); err != nil {
		return base, err
	}
	return t, nil
}
