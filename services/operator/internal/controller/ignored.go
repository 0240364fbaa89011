package controller

import (
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

// ignoredField is a spec field accepted for compatibility with the managed
// offering that has no effect here, and why.
type ignoredField struct{ path, why string }

// ignoredFields lists the fields of iec's spec that are set but have no
// effect (cloud-only in the managed offering), in spec order.
func ignoredFields(iec *v1alpha1.InferenceEndpointConfig) []ignoredField {
	var out []ignoredField
	s := iec.Spec
	if s.EndpointName != "" {
		out = append(out, ignoredField{"spec.endpointName", "no SageMaker endpoint is registered"})
	}
	src := s.ModelSourceConfig
	if fsx := src.FSxStorage; src.ModelSourceType == v1alpha1.ModelSourceFSx && fsx != nil {
		if fsx.DNSName != "" {
			out = append(out, ignoredField{"spec.modelSourceConfig.fsxStorage.dnsName", "it belongs in the FSx CSI PersistentVolume the claim is bound to"})
		}
		if fsx.MountName != "" {
			out = append(out, ignoredField{"spec.modelSourceConfig.fsxStorage.mountName", "it belongs in the FSx CSI PersistentVolume the claim is bound to"})
		}
	}
	if src.PrefetchEnabled && (src.ModelSourceType == v1alpha1.ModelSourceFSx || src.ModelSourceType == v1alpha1.ModelSourceKubernetesVolume) {
		out = append(out, ignoredField{"spec.modelSourceConfig.prefetchEnabled", "a " + string(src.ModelSourceType) + " model is read in place from its claim"})
	}
	if t := s.TLSConfig; t != nil {
		if t.TLSCertificateOutputS3Uri != "" {
			out = append(out, ignoredField{"spec.tlsConfig.tlsCertificateOutputS3Uri", "the router's certificate is the Secret of intelligentRoutingSpec.tlsSecretName, not exported to S3"})
		}
		if t.CustomCertificateConfig != nil {
			out = append(out, ignoredField{"spec.tlsConfig.customCertificateConfig", "ACM certificates are AWS's; use a Secret (cert-manager) in intelligentRoutingSpec.tlsSecretName or ingress.tlsSecretName"})
		}
	}
	return out
}

// setIgnoredFieldsCondition reports the ignored fields (IgnoredFields,
// True) or removes the condition when there are none. It never counts
// towards Ready: an ignored field changes nothing about serving.
func setIgnoredFieldsCondition(iec *v1alpha1.InferenceEndpointConfig) {
	fields := ignoredFields(iec)
	if len(fields) == 0 {
		meta.RemoveStatusCondition(&iec.Status.Conditions, v1alpha1.ConditionIgnoredFields)
		return
	}
	parts := make([]string, len(fields))
	for i, f := range fields {
		parts[i] = f.path + " (" + f.why + ")"
	}
	meta.SetStatusCondition(&iec.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionIgnoredFields, Status: metav1.ConditionTrue, Reason: "CloudOnlyFields", ObservedGeneration: iec.Generation,
		Message: "accepted for compatibility with the managed offering and ignored: " + strings.Join(parts, "; "),
	})
}
