package controllers

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	tetrav1 "github.com/tetra-messenger/tetra/api/v1alpha1"
)

// A change of the fleet hash (a rotated token secret, another Redis)
// replaces the pods instead of rolling them, and keeps replacing until the
// Recreate it started is done; the workload would refuse a new pod beside
// old ones that disagree (the secret-rotation step of test/realnode hung
// on a rolling update: the new pod crash-looped beside the old one).
func TestReplaceForFleet(t *testing.T) {
	dep := func(hash string, strategy appsv1.DeploymentStrategyType, updated, available int32) *appsv1.Deployment {
		d := &appsv1.Deployment{}
		d.Generation, d.Status.ObservedGeneration = 2, 2
		two := int32(2)
		d.Spec.Replicas = &two
		d.Spec.Strategy.Type = strategy
		if hash != "" {
			d.Spec.Template.Annotations = map[string]string{tetrav1.FleetHashAnnotation: hash}
		}
		d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.AvailableReplicas = 2, updated, available
		return d
	}
	for _, c := range []struct {
		name string
		live *appsv1.Deployment
		want bool
	}{
		{"same fleet, rolling", dep("a", appsv1.RollingUpdateDeploymentStrategyType, 2, 2), false},
		{"secret rotated", dep("a-old", appsv1.RollingUpdateDeploymentStrategyType, 2, 2), true},
		{"replacement under way", dep("a", appsv1.RecreateDeploymentStrategyType, 1, 1), true},
		{"replacement done", dep("a", appsv1.RecreateDeploymentStrategyType, 2, 2), false},
		{"rendered by an older operator", dep("", appsv1.RollingUpdateDeploymentStrategyType, 2, 2), false},
	} {
		if got := replaceForFleet(c.live, "a"); got != c.want {
			t.Errorf("%s: replaceForFleet = %v, want %v", c.name, got, c.want)
		}
	}
}
