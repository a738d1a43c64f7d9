// Command render-samples prints, as one multi-document YAML stream, the
// objects the operator renders for each Messenger file given (by default
// config/samples/tetra_v1alpha1_messenger_*.yaml), as the operator would in
// namespace "default" running in "tetra-system". hack/kube-score.sh feeds
// it to kube-score (docs/operator.md, "Production defaults").
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"

	tetrav1 "github.com/tetra-messenger/tetra/api/v1alpha1"
	"github.com/tetra-messenger/tetra/internal/operator/render"
	"github.com/tetra-messenger/tetra/internal/version"
)

func main() {
	files := os.Args[1:]
	if len(files) == 0 {
		var err error
		if files, err = filepath.Glob("config/samples/tetra_v1alpha1_messenger_*.yaml"); err != nil || len(files) == 0 {
			fmt.Fprintln(os.Stderr, "render-samples: no samples under config/samples (run from the repository root)")
			os.Exit(2)
		}
	}
	for _, f := range files {
		if err := one(f); err != nil {
			fmt.Fprintf(os.Stderr, "render-samples: %s: %v\n", f, err)
			os.Exit(1)
		}
	}
}

func one(file string) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var m tetrav1.Messenger
	if err := yaml.UnmarshalStrict(raw, &m); err != nil {
		return err
	}
	if m.Namespace == "" {
		m.Namespace = "default"
	}
	m.UID = "00000000-0000-0000-0000-000000000000"
	versions := map[string]string{}
	for _, n := range render.SecretNames(&m) {
		versions[n] = "1"
	}
	o, err := render.Render(&m, render.Inputs{DefaultImage: version.WorkloadImage, SecretVersions: versions, OperatorNamespace: "tetra-system"})
	if err != nil {
		return err
	}
	objs := []any{o.ConfigMap, o.Service, o.Deployment}
	if o.PDB != nil {
		objs = append(objs, o.PDB)
	}
	if o.NetworkPolicy != nil {
		objs = append(objs, o.NetworkPolicy)
	}
	for _, obj := range objs {
		b, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		fmt.Printf("# rendered from %s\n---\n%s", file, b)
	}
	return nil
}
