// Package v1alpha1 is the inference.warmpath.io/v1alpha1 API: the
// InferenceEndpointConfig resource, whose field names follow the managed
// offering's resource of the same name so its manifests carry over.
//
// +kubebuilder:object:generate=true
// +groupName=inference.warmpath.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API's group and version.
	GroupVersion = schema.GroupVersion{Group: "inference.warmpath.io", Version: "v1alpha1"}

	// SchemeBuilder registers the API's types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
