package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDefaultIsValidAndRoundTrips(t *testing.T) {
	d := Default()
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	var back Tuning
	for k, v := range d.Render() {
		if err := back.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	if back != d {
		t.Fatalf("render/set round trip changed the tuning:\n%+v\n%+v", back, d)
	}
	if len(d.Render()) != len(Keys) {
		t.Fatalf("Render has %d keys, Keys lists %d", len(d.Render()), len(Keys))
	}
}

func TestValidateNamesTheField(t *testing.T) {
	for key, mut := range map[string]func(*Tuning){
		"maxDeliveryAttempts": func(t *Tuning) { t.MaxDeliveryAttempts = 0 },
		"lease":               func(t *Tuning) { t.Lease = time.Millisecond },
		"maxPending":          func(t *Tuning) { t.MaxPending = -1 },
		"historyRetention":    func(t *Tuning) { t.HistoryRetention = t.OutboxRetention },
	} {
		tu := Default()
		mut(&tu)
		err := tu.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), key) {
			t.Errorf("%s: error %v does not name the field first", key, err)
		}
	}
}

func TestLoadDirLikeAConfigMapVolume(t *testing.T) {
	dir := t.TempDir()
	// Kubernetes mounts a ConfigMap as ..data -> ..<timestamp>/ with one
	// symlink per key pointing into ..data.
	ts := filepath.Join(dir, "..2026_11_30_13_00_00.1")
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ts, "maxDeliveryAttempts"), []byte("5\n"), 0o644)
	os.WriteFile(filepath.Join(ts, "lease"), []byte("20s"), 0o644)
	os.WriteFile(filepath.Join(ts, "futureKey"), []byte("x"), 0o644)
	os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data"))
	for _, k := range []string{"maxDeliveryAttempts", "lease", "futureKey"} {
		os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k))
	}
	got, err := LoadDir(dir, Default())
	if err != nil {
		t.Fatal(err)
	}
	if got.MaxDeliveryAttempts != 5 || got.Lease != 20*time.Second || got.MaxPending != Default().MaxPending {
		t.Fatalf("loaded %+v", got)
	}
	os.WriteFile(filepath.Join(ts, "maxPending"), []byte("zero"), 0o644)
	os.Symlink(filepath.Join("..data", "maxPending"), filepath.Join(dir, "maxPending"))
	if _, err := LoadDir(dir, Default()); err == nil || !strings.Contains(err.Error(), "maxPending") {
		t.Fatalf("a malformed value was accepted or not named: %v", err)
	}
}

// Unknown names are listed (to be warned about), not applied, not errors.
func TestReadDirListsUnknownNames(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "maxPending"), []byte("7"), 0o644)
	os.WriteFile(filepath.Join(dir, "maxPendng"), []byte("9"), 0o644)
	os.WriteFile(filepath.Join(dir, "README"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(dir, ".hidden"), []byte("x"), 0o644)
	l, err := ReadDir(dir, Default())
	if err != nil {
		t.Fatal(err)
	}
	if l.Tuning.MaxPending != 7 || !slices.Equal(l.Unknown, []string{"README", "maxPendng"}) {
		t.Fatalf("maxPending %d, unknown %v; want 7 and [README maxPendng]", l.Tuning.MaxPending, l.Unknown)
	}
}

func TestDiffNamesTheChangedKeys(t *testing.T) {
	a, b := Default(), Default()
	if d := Diff(a, b); len(d) != 0 {
		t.Fatalf("Diff of equal tunings: %v", d)
	}
	b.PollBatch, b.Lease = 100, 20*time.Second
	want := []Change{{"lease", "10s", "20s"}, {"pollBatch", "6000", "100"}}
	if d := Diff(a, b); !slices.Equal(d, want) {
		t.Fatalf("Diff = %v, want %v", d, want)
	}
}
