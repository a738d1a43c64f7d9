package render_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	tetrav1 "github.com/tetra-messenger/tetra/api/v1alpha1"
	"github.com/tetra-messenger/tetra/internal/operator/render"
	"github.com/tetra-messenger/tetra/workload/config"
)

// schema is the part of an OpenAPI v3 schema the markers write.
type schema struct {
	Properties  map[string]schema `json:"properties"`
	Default     any               `json:"default"`
	Minimum     *int64            `json:"minimum"`
	Maximum     *int64            `json:"maximum"`
	Validations []struct {
		Rule string `json:"rule"`
	} `json:"x-kubernetes-validations"`
}

// specSchema reads the generated CRD's schema of spec.
func specSchema(t *testing.T) schema {
	t.Helper()
	raw, err := os.ReadFile("../../../config/crd/bases/tetra.dev_messengers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema schema `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
}

var durationRule = regexp.MustCompile(`duration\(self\) (>=|<=) duration\('([^']+)'\)`)

// TestCRDMarkersFollowTheKnobTable: every tuning knob with a Messenger
// field (config.Knobs) has in the CRD the knob's range and default, so the
// API server refuses exactly what the workload would refuse.
func TestCRDMarkersFollowTheKnobTable(t *testing.T) {
	spec := specSchema(t)
	def := config.Default()
	for _, k := range config.Knobs {
		if k.CRD == "" {
			continue
		}
		s, ok := spec, true
		for _, part := range strings.Split(k.CRD, ".") {
			if s, ok = s.Properties[part]; !ok {
				break
			}
		}
		if !ok {
			t.Errorf("%s: the CRD has no spec.%s", k.Key, k.CRD)
			continue
		}
		switch k.Kind {
		case config.Count:
			if s.Minimum == nil || *s.Minimum != k.Min || s.Maximum == nil || *s.Maximum != k.Max {
				t.Errorf("spec.%s: minimum/maximum %v/%v, the knob %s has %d/%d", k.CRD, deref(s.Minimum), deref(s.Maximum), k.Key, k.Min, k.Max)
			}
			if f, ok := s.Default.(float64); !ok || k.Text(def) != strings.TrimSuffix(strings.TrimSuffix(jsonText(f), ".0"), ".") {
				t.Errorf("spec.%s: default %v, the knob %s defaults to %s", k.CRD, s.Default, k.Key, k.Text(def))
			}
		case config.Duration:
			lo, hi := time.Duration(0), time.Duration(-1)
			for _, v := range s.Validations {
				for _, m := range durationRule.FindAllStringSubmatch(v.Rule, -1) {
					d, err := time.ParseDuration(m[2])
					if err != nil {
						t.Fatalf("spec.%s: rule %q: %v", k.CRD, v.Rule, err)
					}
					if m[1] == ">=" {
						lo = d
					} else {
						hi = d
					}
				}
			}
			if int64(lo) != k.Min || int64(hi) != k.Max {
				t.Errorf("spec.%s: the CEL rule allows %v..%v, the knob %s %v..%v", k.CRD, lo, hi, k.Key, time.Duration(k.Min), time.Duration(k.Max))
			}
			ds, _ := s.Default.(string)
			if d, err := time.ParseDuration(ds); err != nil || d.String() != k.Text(def) {
				t.Errorf("spec.%s: default %q, the knob %s defaults to %s", k.CRD, ds, k.Key, k.Text(def))
			}
		}
	}
}

// TestRenderSetsEveryKnob: each Messenger field of the table reaches its
// knob in the rendered tuning (a field the renderer forgot would keep the
// default silently).
func TestRenderSetsEveryKnob(t *testing.T) {
	def := config.Default()
	for _, k := range config.Knobs {
		if k.CRD == "" {
			continue
		}
		// A valid value other than the default: the lowest allowed, or
		// the next one when that is the default.
		want := k.Min
		if want == valueOf(t, k, def) {
			want++
		}
		var text any = want
		if k.Kind == config.Duration {
			text = time.Duration(want).String()
		}
		path := strings.Split(k.CRD, ".")
		doc := map[string]any{path[len(path)-1]: text}
		for i := len(path) - 2; i >= 0; i-- {
			doc = map[string]any{path[i]: doc}
		}
		raw, _ := json.Marshal(doc)
		m := &tetrav1.Messenger{}
		if err := json.Unmarshal(raw, &m.Spec); err != nil {
			t.Fatalf("%s: %s: %v", k.Key, raw, err)
		}
		got, err := render.Tuning(m)
		if err != nil {
			// The value may break a cross-field rule (history must exceed
			// the outbox backstop); the mapping is what is under test.
			if !strings.Contains(err.Error(), "must exceed") {
				t.Errorf("%s: %v", k.Key, err)
			}
			continue
		}
		if v := valueOf(t, k, got); v != want {
			t.Errorf("spec.%s = %v rendered %s = %d, want %d", k.CRD, text, k.Key, v, want)
		}
	}
}

func valueOf(t *testing.T, k config.Knob, tu config.Tuning) int64 {
	t.Helper()
	if k.Kind == config.Duration {
		d, err := time.ParseDuration(k.Text(tu))
		if err != nil {
			t.Fatal(err)
		}
		return int64(d)
	}
	var n int64
	if err := json.Unmarshal([]byte(k.Text(tu)), &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func jsonText(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}
