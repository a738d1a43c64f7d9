package config

import (
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReadmeKnobTableFollowsTheKnobs: the README's configuration table has
// a row for every knob's flag, with the knob's default.
func TestReadmeKnobTableFollowsTheKnobs(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defaults := map[string]string{} // flag -> default cell text
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "| `--") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			continue
		}
		flags := strings.Split(cells[1], " / ")
		vals := strings.Split(cells[2], " / ")
		for i, f := range flags {
			f = strings.Trim(strings.TrimSpace(f), "`")
			if i < len(vals) {
				v := strings.TrimSpace(vals[i])
				if j := strings.Index(v, "`"); j >= 0 {
					v = v[j+1:]
					v = v[:strings.Index(v, "`")]
				}
				defaults[strings.TrimPrefix(f, "--")] = v
			}
		}
	}
	def := Default()
	for _, k := range Knobs {
		got, ok := defaults[k.Flag]
		if !ok {
			t.Errorf("README has no row for --%s (knob %s)", k.Flag, k.Key)
			continue
		}
		want := k.value(&def)
		var v int64
		switch k.Kind {
		case Duration:
			d, err := time.ParseDuration(got)
			if err != nil {
				t.Errorf("README: --%s default %q is not a duration", k.Flag, got)
				continue
			}
			v = int64(d)
		case Count:
			n, err := strconv.ParseInt(got, 10, 64)
			if err != nil {
				t.Errorf("README: --%s default %q is not a number", k.Flag, got)
				continue
			}
			v = n
		}
		if v != want {
			t.Errorf("README: --%s default %q, the knob %s defaults to %s", k.Flag, got, k.Key, k.Text(def))
		}
	}
}

// TestKnobsAreComplete: every knob round-trips through Set and Render, its
// default lies in its range, and keys and flags are unique.
func TestKnobsAreComplete(t *testing.T) {
	def := Default()
	keys, flags := map[string]bool{}, map[string]bool{}
	for _, k := range Knobs {
		if keys[k.Key] || flags[k.Flag] {
			t.Errorf("knob %s/--%s named twice", k.Key, k.Flag)
		}
		keys[k.Key], flags[k.Flag] = true, true
		if v := k.value(&def); v < k.Min || v > k.Max {
			t.Errorf("%s: default %s outside %d..%d", k.Key, k.Text(def), k.Min, k.Max)
		}
		var t2 Tuning
		if err := t2.Set(k.Key, k.Text(def)); err != nil || k.value(&t2) != k.value(&def) {
			t.Errorf("%s: Set(Render) = %v, %d; want %d", k.Key, err, k.value(&t2), k.value(&def))
		}
	}
	if len(def.Render()) != len(Knobs) {
		t.Errorf("Render has %d keys, Knobs %d", len(def.Render()), len(Knobs))
	}
	// Every field of Tuning is some knob's: a field added without one
	// would be neither a flag nor a tuning file.
	var x Tuning
	owned := map[uintptr]bool{}
	for _, k := range Knobs {
		owned[reflect.ValueOf(k.field(&x)).Pointer()] = true
	}
	rv := reflect.ValueOf(&x).Elem()
	for i := range rv.NumField() {
		if !owned[rv.Field(i).Addr().Pointer()] {
			t.Errorf("Tuning.%s has no knob in Knobs", rv.Type().Field(i).Name)
		}
	}
}
