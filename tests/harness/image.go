package harness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// imageRepoPrefix names the repositories of harness images; the tag is a
// content hash, so `make images` tags (warmpath/<name>:dev) never collide.
const imageRepoPrefix = "warmpath-test/"

// imageTimeout bounds one image build; the context is a single binary.
const imageTimeout = 3 * time.Minute

type imageResult struct {
	once sync.Once
	tag  string
	err  error
}

// images maps a content key to its *imageResult, so concurrent tests in one
// process build an image at most once.
var images sync.Map

// Image returns the tag of a FROM-scratch image that holds pkg's binary (see
// Binary) at /<name> as its entrypoint, exposing port (e.g. "8000"). The tag
// is warmpath-test/<name>:<port>-<hash> where the hash covers the binary, the
// Dockerfile and the port: an image that already exists is reused, so an
// unchanged binary is packaged once across all runs. Building a new tag
// removes older ones for the same port; `make clean` removes them all.
func Image(t testing.TB, pkg, port string) string {
	t.Helper()
	RequireDocker(t)
	bin := Binary(t, pkg)
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	dockerfile, err := os.ReadFile(filepath.Join(root, "build", "Dockerfile"))
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	sum, err := contentHash(bin, dockerfile, port)
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(bin)
	tag := imageRepoPrefix + name + ":" + port + "-" + sum

	return onceImage(t, tag, func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), imageTimeout)
		defer cancel()
		return ensureImage(ctx, tag, bin, dockerfile, port)
	})
}

// onceImage runs build for tag at most once per process, and returns its
// tag or fails the test with its error.
func onceImage(t testing.TB, tag string, build func() (string, error)) string {
	t.Helper()
	v, _ := images.LoadOrStore(tag, &imageResult{})
	r := v.(*imageResult)
	r.once.Do(func() { r.tag, r.err = build() })
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.tag
}

// contentHash returns a short hex SHA-256 over the binary, the Dockerfile
// and the port, each length-prefixed so no two inputs share a hash by
// concatenation.
func contentHash(bin string, dockerfile []byte, port string) (string, error) {
	f, err := os.Open(bin)
	if err != nil {
		return "", fmt.Errorf("harness: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("harness: %w", err)
	}
	fmt.Fprintf(h, "bin %d\n", fi.Size())
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("harness: hash %s: %w", bin, err)
	}
	fmt.Fprintf(h, "dockerfile %d\n%s", len(dockerfile), dockerfile)
	fmt.Fprintf(h, "port %d\n%s", len(port), port)
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// ensureImage builds tag from bin and build/Dockerfile unless the daemon
// already has it.
func ensureImage(ctx context.Context, tag, bin string, dockerfile []byte, port string) (string, error) {
	name := filepath.Base(bin)
	return buildImage(ctx, tag, func() (string, error) { return stageContext(bin, dockerfile) },
		map[string]*string{"BIN": &name, "PORT": &port}, port)
}

// buildImage builds tag from the context stage lays out (and buildImage
// removes), unless the daemon already has it, then removes the older tags
// of the same repository and port.
func buildImage(ctx context.Context, tag string, stage func() (string, error), args map[string]*string, port string) (string, error) {
	provider, err := testcontainers.NewDockerProvider()
	if err != nil {
		return "", fmt.Errorf("harness: docker provider: %w", err)
	}
	defer provider.Close()

	_, err = provider.Client().ImageInspect(ctx, tag)
	switch {
	case err == nil:
		return tag, nil
	case !errdefs.IsNotFound(err):
		return "", fmt.Errorf("harness: inspect image %s: %w", tag, err)
	}

	dir, err := stage()
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)

	repo, version, _ := strings.Cut(tag, ":")
	var log strings.Builder
	req := &testcontainers.ContainerRequest{
		FromDockerfile: testcontainers.FromDockerfile{
			Context:        dir,
			Dockerfile:     "Dockerfile",
			Repo:           repo,
			Tag:            version,
			BuildArgs:      args,
			BuildLogWriter: &log,
			// Keep the image: the hash tag is the cache.
			KeepImage: true,
			BuildOptionsModifier: func(o *client.ImageBuildOptions) {
				o.Labels = map[string]string{LabelTest: "true"}
			},
		},
	}
	if _, err := provider.BuildImage(ctx, req); err != nil {
		return "", fmt.Errorf("harness: build image %s: %w\n%s", tag, err, log.String())
	}
	removeStale(ctx, provider.Client(), repo, port+"-", tag)
	return tag, nil
}

// removeStale removes the tags of repo that start with prefix, except keep:
// images of binaries that have since changed. It is best effort; an image a
// container still uses stays.
func removeStale(ctx context.Context, cli client.APIClient, repo, prefix, keep string) {
	list, err := cli.ImageList(ctx, client.ImageListOptions{
		Filters: client.Filters{}.Add("reference", repo).Add("label", LabelTest+"=true"),
	})
	if err != nil {
		return
	}
	for _, img := range list.Items {
		for _, t := range img.RepoTags {
			if t != keep && strings.HasPrefix(t, repo+":"+prefix) {
				_, _ = cli.ImageRemove(ctx, t, client.ImageRemoveOptions{})
			}
		}
	}
}

// stageContext lays out a build context for build/Dockerfile:
//
//	Dockerfile
//	<name>/<name>       the binary
//	<name>/entrypoint   symlink to <name>
func stageContext(bin string, dockerfile []byte) (string, error) {
	dir, err := os.MkdirTemp("", "warmpath-image-")
	if err != nil {
		return "", fmt.Errorf("harness: %w", err)
	}
	name := filepath.Base(bin)
	if err := stage(dir, name, bin, dockerfile); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("harness: stage image context: %w", err)
	}
	return dir, nil
}

func stage(dir, name, bin string, dockerfile []byte) error {
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), dockerfile, 0o644); err != nil {
		return err
	}
	sub := filepath.Join(dir, name)
	if err := os.Mkdir(sub, 0o755); err != nil {
		return err
	}
	if err := os.Link(bin, filepath.Join(sub, name)); err != nil {
		if err := copyFile(bin, filepath.Join(sub, name)); err != nil {
			return err
		}
	}
	return os.Symlink(name, filepath.Join(sub, "entrypoint"))
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
