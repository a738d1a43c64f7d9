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

// Set parses value into the setting named key. Unknown keys and malformed
// values are errors naming the key.
func (t *Tuning) Set(key, value string) error {
	k, ok := knob(key)
	if !ok {
		return fmt.Errorf("unknown tuning key %q (known: %s)", key, strings.Join(Keys, ", "))
	}
	value = strings.TrimSpace(value)
	switch p := k.field(t).(type) {
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
	out := make(map[string]string, len(Knobs))
	for _, k := range Knobs {
		out[k.Key] = k.Text(t)
	}
	return out
}

// Loaded is what ReadDir found in a tuning directory.
type Loaded struct {
	// Tuning is base with every key file applied, validated.
	Tuning Tuning
	// Unknown names, sorted, the entries that are not hidden and name no
	// key: ignored (a newer operator may add keys), but worth a warning,
	// since a misspelt key ("maxPendng") changes nothing silently.
	Unknown []string
}

// LoadDir is ReadDir without the unknown names.
func LoadDir(dir string, base Tuning) (Tuning, error) {
	l, err := ReadDir(dir, base)
	return l.Tuning, err
}

// ReadDir reads a mounted ConfigMap directory: each regular file whose name
// is a key overrides that setting of base; hidden entries (the ..data
// machinery of Kubernetes volumes) are ignored, and so are unknown names,
// which Loaded.Unknown lists. The result is validated. On any error (a
// file that cannot be read, a malformed value, a tuning Validate refuses;
// each names its key) Loaded.Tuning is base.
func ReadDir(dir string, base Tuning) (Loaded, error) {
	out := Loaded{Tuning: base}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return out, fmt.Errorf("config: read %s: %w", dir, err)
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
		if strings.HasPrefix(name, ".") {
			continue
		}
		if !known[name] {
			out.Unknown = append(out.Unknown, name)
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
		return out, err
	}
	if err := t.Validate(); err != nil {
		return out, err
	}
	out.Tuning = t
	return out, nil
}

// Change is one setting that differs between two tunings, as Render
// writes it.
type Change struct {
	Key, From, To string
}

// Diff lists the settings whose values differ from a to b, in the order of
// Keys; empty when a == b.
func Diff(a, b Tuning) []Change {
	ra, rb := a.Render(), b.Render()
	var out []Change
	for _, k := range Keys {
		if ra[k] != rb[k] {
			out = append(out, Change{Key: k, From: ra[k], To: rb[k]})
		}
	}
	return out
}
