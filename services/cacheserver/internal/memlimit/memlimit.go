// Package memlimit chooses the Go runtime's soft memory limit for the
// cache server. Without one the heap grows to twice what is live before a
// collection (GOGC=100), so a server holding its full memory tier could
// use twice its configured capacity, and a container limit set from that
// capacity would OOM-kill it.
package memlimit

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cgroupShare is the part of a container's memory limit the Go heap may
// use: the rest is for what the runtime does not count (stacks freed late,
// the binary, the kernel's socket buffers charged to the cgroup).
const cgroupShare = 0.9

// Choose returns the memory limit to set and where it came from. In order:
// GOMEMLIMIT in the environment (the runtime has applied it; limit 0: leave
// it), flagBytes when positive, cgroupShare of the cgroup's memory limit
// (v2 memory.max, else v1 memory.limit_in_bytes, under root), else
// fallback (the server derives it from its capacity). root is "/" outside
// tests.
func Choose(env func(string) (string, bool), root string, flagBytes, fallback int64) (limit int64, source string, err error) {
	if v, ok := env("GOMEMLIMIT"); ok && v != "" {
		return 0, "GOMEMLIMIT", nil
	}
	if flagBytes > 0 {
		return flagBytes, "flag", nil
	}
	cg, err := cgroupLimit(root)
	if err != nil {
		return 0, "", err
	}
	if cg > 0 {
		return int64(float64(cg) * cgroupShare), "cgroup", nil
	}
	return fallback, "capacity", nil
}

// cgroupLimit reads the cgroup memory limit; 0 when there is none.
func cgroupLimit(root string) (int64, error) {
	for _, p := range []string{"sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(filepath.Join(root, p))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("memlimit: %w", err)
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("memlimit: %s: %w", p, err)
		}
		// cgroup v1 writes "no limit" as a page-rounded MaxInt64.
		if n <= 0 || n >= math.MaxInt64/2 {
			return 0, nil
		}
		return n, nil
	}
	return 0, nil
}
