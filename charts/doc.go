// Package charts holds no code: it is the home of the operator's Helm chart
// (charts/tetra-operator) and of the Go test that renders it with the Helm
// library, checks it against values.schema.json and checks that its CRD
// and RBAC are the ones generated into config/.
package charts
