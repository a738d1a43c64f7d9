package version_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tetra-messenger/tetra/internal/version"
)

const root = "../.."

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Every place that names a tetra image or release says version.Version.
func TestVersionIsOneVersion(t *testing.T) {
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "charts/tetra-operator/Chart.yaml")), &chart); err != nil {
		t.Fatal(err)
	}
	if chart.AppVersion != version.Version || chart.Version != version.Version {
		t.Errorf("Chart.yaml version %q appVersion %q, want both %q (internal/version)", chart.Version, chart.AppVersion, version.Version)
	}
	var kust struct {
		Images []struct {
			Name, NewName, NewTag string
		} `json:"images"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "config/manager/kustomization.yaml")), &kust); err != nil {
		t.Fatal(err)
	}
	if len(kust.Images) != 1 || kust.Images[0].NewTag != version.Version {
		t.Errorf("config/manager/kustomization.yaml images %+v, want newTag %q", kust.Images, version.Version)
	}
	if m := read(t, "config/manager/manager.yaml"); !strings.Contains(m, "--default-image="+version.WorkloadImage+"\n") {
		t.Errorf("config/manager/manager.yaml does not pass --default-image=%s", version.WorkloadImage)
	}
}

// No manifest, sample or chart file names a :latest (or untagged tetra)
// image: :latest means imagePullPolicy Always, which a node without a
// registry cannot run.
func TestNoLatestImages(t *testing.T) {
	image := regexp.MustCompile(`ghcr\.io/tetra-messenger/tetra(-operator)?(:[A-Za-z0-9._-]+)?`)
	n := 0
	for _, dir := range []string{"config", "charts/tetra-operator"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !(strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".json") || strings.HasSuffix(p, ".tpl")) {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			n++
			s := string(b)
			if strings.Contains(s, ":latest") {
				t.Errorf("%s names a :latest image", p)
			}
			for _, ref := range image.FindAllStringSubmatch(s, -1) {
				if ref[2] != "" && ref[2] != ":"+version.Version {
					t.Errorf("%s names %s, want tag %s", p, ref[0], version.Version)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n < 10 {
		t.Fatalf("looked at %d files only", n)
	}
}
