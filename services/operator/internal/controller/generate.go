package controller

// The operator's ClusterRole comes from the +kubebuilder:rbac markers in
// reconciler.go; TestRBACIsCurrent fails when config/rbac is stale.
//go:generate go run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0 rbac:roleName=warmpath-operator paths=. output:rbac:artifacts:config=../../config/rbac
