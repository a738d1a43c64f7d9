// Package config holds no code: it is the operator's kustomize tree (crd,
// rbac, manager, default, samples) and the Go test that builds it with the
// kustomize library (krusty) and checks the samples against the CRD.
package config
