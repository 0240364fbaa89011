// Package v1alpha1 is the inference.warmpath.io/v1alpha1 API: the
// InferenceEndpointConfig resource, whose field names follow the managed
// offering's resource of the same name so its manifests carry over.
//
// +kubebuilder:object:generate=true
// +groupName=inference.warmpath.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API's group and version.
var GroupVersion = schema.GroupVersion{Group: "inference.warmpath.io", Version: "v1alpha1"}

// AddToScheme adds the API's types to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &InferenceEndpointConfig{}, &InferenceEndpointConfigList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
