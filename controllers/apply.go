package controllers

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// toApplyUnstructured converts a rendered typed object into the
// unstructured form of an apply configuration: status dropped and every
// null removed (a typed struct marshals unset timestamps as null, and an
// apply that names a field as null would claim and clear it).
func toApplyUnstructured(obj client.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	delete(m, "status")
	pruneNulls(m)
	return &unstructured.Unstructured{Object: m}, nil
}

func pruneNulls(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if x == nil {
				delete(t, k)
				continue
			}
			pruneNulls(x)
		}
	case []any:
		for _, x := range t {
			pruneNulls(x)
		}
	}
}
