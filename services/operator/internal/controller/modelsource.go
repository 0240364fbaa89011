package controller

import (
	"path"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

// modelFetchContainer is the init container that copies an s3 model source
// into the model volume.
const modelFetchContainer = "model-fetch"

// modelSourcePod is what the model source adds to the worker pod: volumes,
// the worker container's mounts and init containers.
type modelSourcePod struct {
	Volumes        []corev1.Volume
	Mounts         []corev1.VolumeMount
	InitContainers []corev1.Container
}

// modelVolume derives where the model comes from into pod parts that put it
// at worker.modelVolumeMount (the CRD requires the mount for every source
// but huggingface).
func modelVolume(iec *v1alpha1.InferenceEndpointConfig, o Options) modelSourcePod {
	src, m := iec.Spec.ModelSourceConfig, iec.Spec.Worker.ModelVolumeMount
	if m == nil {
		return modelSourcePod{}
	}
	var p modelSourcePod
	claim := func(name string, ro bool, subPath string) {
		p.Volumes = append(p.Volumes, corev1.Volume{Name: m.Name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name, ReadOnly: ro}}})
		p.Mounts = append(p.Mounts, corev1.VolumeMount{Name: m.Name, MountPath: m.MountPath, ReadOnly: ro, SubPath: subPath})
	}
	// The model's copy lives as long as the pod; in RAM when prefetched
	// (the managed offering's prefetchEnabled), where it is counted
	// against the pod's memory.
	scratch := func() {
		ed := &corev1.EmptyDirVolumeSource{}
		if src.PrefetchEnabled {
			ed.Medium = corev1.StorageMediumMemory
		}
		p.Volumes = append(p.Volumes, corev1.Volume{Name: m.Name, VolumeSource: corev1.VolumeSource{EmptyDir: ed}})
		p.Mounts = append(p.Mounts, corev1.VolumeMount{Name: m.Name, MountPath: m.MountPath})
	}
	switch src.ModelSourceType {
	case v1alpha1.ModelSourceKubernetesVolume:
		if src.KubernetesVolume != nil {
			claim(src.KubernetesVolume.ClaimName, isTrue(src.KubernetesVolume.ReadOnly, true), "")
		}
	case v1alpha1.ModelSourceFSx:
		if fsx := src.FSxStorage; fsx != nil {
			name := fsx.ClaimName
			if name == "" {
				name = fsx.FileSystemID
			}
			// modelLocation is the model's directory in the file system;
			// mounting it as the subPath puts the model at the mount path,
			// where the managed offering's manifests point vLLM.
			claim(name, true, src.ModelLocation)
		}
	case v1alpha1.ModelSourceHuggingFace:
		scratch()
	case v1alpha1.ModelSourceS3:
		scratch()
		// The simulator loads no weights: unless asked to, it fetches
		// none, so a GPU manifest can be tried on a CPU-only cluster.
		if fetchesModel(iec) {
			p.InitContainers = append(p.InitContainers, modelFetch(iec, o))
		}
	}
	return p
}

// modelFetch is the init container copying the bucket's modelLocation
// prefix to the root of the model volume (where the managed offering's
// manifests point vLLM). It restarts on failure with the pod, and the copy
// resumes: the files it completed stay in the emptyDir.
func modelFetch(iec *v1alpha1.InferenceEndpointConfig, o Options) corev1.Container {
	s3, m := iec.Spec.ModelSourceConfig.S3Storage, iec.Spec.Worker.ModelVolumeMount
	args := []string{"--bucket", s3.BucketName, "--prefix", iec.Spec.ModelSourceConfig.ModelLocation, "--dest", m.MountPath}
	if s3.Region != "" {
		args = append(args, "--region", s3.Region)
	}
	if s3.EndpointURL != "" {
		args = append(args, "--endpoint-url", s3.EndpointURL, "--path-style")
	}
	var env []corev1.EnvVar
	if ref := s3.CredentialsSecretRef; ref != nil {
		key := func(name string, optional bool) corev1.EnvVar {
			return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: *ref.DeepCopy(), Key: name, Optional: optionalPtr(optional)}}}
		}
		env = append(env, key("AWS_ACCESS_KEY_ID", false), key("AWS_SECRET_ACCESS_KEY", false), key("AWS_SESSION_TOKEN", true))
	}
	return corev1.Container{
		Name:            modelFetchContainer,
		Image:           o.ModelFetchImage,
		Args:            args,
		Env:             env,
		VolumeMounts:    []corev1.VolumeMount{{Name: m.Name, MountPath: m.MountPath}},
		SecurityContext: containerSecurity(true),
		// No memory limit: with prefetchEnabled the files land in tmpfs,
		// whose pages are charged to the container writing them, and a
		// limit below the model's size would kill the copy.
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}},
	}
}

func optionalPtr(b bool) *bool {
	if !b {
		return nil
	}
	return &b
}

// modelPath is the model vLLM serves from the model volume: s3 and fsx put
// the model at the mount path itself (the bucket prefix is copied to its
// root; the file system's directory is its subPath); a claim holds it at
// modelLocation below the mount.
func modelPath(iec *v1alpha1.InferenceEndpointConfig) string {
	src, m := iec.Spec.ModelSourceConfig, iec.Spec.Worker.ModelVolumeMount
	switch src.ModelSourceType {
	case v1alpha1.ModelSourceS3, v1alpha1.ModelSourceFSx:
		return m.MountPath
	}
	return path.Join(m.MountPath, src.ModelLocation)
}
