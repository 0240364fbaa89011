package v1alpha1

// The deepcopy functions and the CRD are generated; `make generate` runs
// this, and TestGeneratedFilesAreCurrent fails when they are stale.
//go:generate go run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0 object paths=. crd:allowDangerousTypes=true output:crd:artifacts:config=../../config/crd
