package harness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// HostImage returns the tag of a FROM-scratch image that runs bin, a
// dynamically linked program installed on this machine (redis-server from
// Debian's package), with the shared libraries ldd lists for it at the same
// paths: no registry is reachable here, so peers the suites did not write
// are packaged from the host's own binaries. The image runs bin as its
// entrypoint, as uid 65534, exposing port. Like Image, the tag is a hash of
// what goes in, so an unchanged binary is packaged once.
func HostImage(t testing.TB, bin, port string) string {
	t.Helper()
	RequireDocker(t)
	path, err := exec.LookPath(bin)
	if err != nil {
		t.Fatalf("harness: %s is not installed here (scripts/install-tools.sh installs the peers the suites use): %v", bin, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), imageTimeout)
	defer cancel()
	files, err := sharedLibraries(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{path}, files...)
	dockerfile := fmt.Appendf(nil, "FROM scratch\nCOPY rootfs/ /\nUSER 65534:65534\nEXPOSE %s\nENTRYPOINT [%q]\n", port, path)
	sum, err := filesHash(files, dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(path)
	tag := imageRepoPrefix + name + ":" + port + "-" + sum
	return onceImage(t, tag, func() (string, error) {
		return buildImage(ctx, tag, func() (string, error) { return stageRootfs(files, dockerfile) }, nil, port)
	})
}

// sharedLibraries returns the absolute paths ldd lists for bin: every
// library it links and the dynamic loader.
func sharedLibraries(ctx context.Context, bin string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("harness: ldd %s: %w", bin, err)
	}
	var libs []string
	for line := range strings.SplitSeq(string(out), "\n") {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)",
		// "/lib64/ld-linux-x86-64.so.2 (0x...)", or the vDSO, which has no file.
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0])
		}
	}
	if len(libs) == 0 {
		return nil, fmt.Errorf("harness: ldd %s listed no libraries: %s", bin, out)
	}
	return libs, nil
}

// filesHash is a short hex SHA-256 over each file's path and content, then
// the Dockerfile.
func filesHash(files []string, dockerfile []byte) (string, error) {
	h := sha256.New()
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			return "", fmt.Errorf("harness: %w", err)
		}
		fmt.Fprintf(h, "file %d %s %d\n", len(p), p, len(b))
		_, _ = h.Write(b)
	}
	fmt.Fprintf(h, "dockerfile %d\n%s", len(dockerfile), dockerfile)
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// stageRootfs lays out a build context: the Dockerfile, and rootfs/ holding
// each file's content (symlinks followed), executable, at its own path.
func stageRootfs(files []string, dockerfile []byte) (string, error) {
	dir, err := os.MkdirTemp("", "warmpath-hostimage-")
	if err != nil {
		return "", fmt.Errorf("harness: %w", err)
	}
	fail := func(err error) (string, error) {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("harness: stage host image: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), dockerfile, 0o644); err != nil {
		return fail(err)
	}
	for _, p := range files {
		dst := filepath.Join(dir, "rootfs", p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fail(err)
		}
		if err := copyFile(p, dst); err != nil { // opening follows symlinks
			return fail(err)
		}
	}
	return dir, nil
}
