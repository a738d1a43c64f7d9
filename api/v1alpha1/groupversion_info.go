// Package v1alpha1 holds the Messenger custom resource (group tetra.dev,
// version v1alpha1): the declaration from which the operator renders and
// rolls out the messenger workload.
//
// Defaults and validation live in the schema (kubebuilder markers and CEL
// x-kubernetes-validations), so a bad spec is refused by the API server with
// a message naming the field; the controller never has to guess. The tuning
// fields mirror the keys of workload/config one to one; the controller turns
// them into a config.Tuning and renders it with Tuning.Render.
//
// +kubebuilder:object:generate=true
// +groupName=tetra.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the Messenger resource.
	GroupVersion = schema.GroupVersion{Group: "tetra.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this group-version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
