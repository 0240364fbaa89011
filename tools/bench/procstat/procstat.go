// Package procstat reads a process's CPU time and memory from Linux's
// /proc, for benchmarks that measure a child process from outside it.
package procstat

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc/<pid>/stat's CPU times: the kernel reports
// them in USER_HZ, fixed at 100 for user space whatever the kernel's HZ.
const userHZ = 100

// Sample is one reading of a process.
type Sample struct {
	// CPU is the user and system time the process has used so far.
	CPU time.Duration
	// RSS is its resident memory now, PeakRSS the high-water mark.
	RSS, PeakRSS int64
}

// Read samples process pid.
func Read(pid int) (Sample, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Sample{}, fmt.Errorf("procstat: %w", err)
	}
	cpu, err := parseCPU(string(stat))
	if err != nil {
		return Sample{}, fmt.Errorf("procstat: pid %d: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Sample{}, fmt.Errorf("procstat: %w", err)
	}
	s := Sample{CPU: cpu}
	if s.RSS, err = statusBytes(string(status), "VmRSS:"); err != nil {
		return Sample{}, fmt.Errorf("procstat: pid %d: %w", pid, err)
	}
	if s.PeakRSS, err = statusBytes(string(status), "VmHWM:"); err != nil {
		return Sample{}, fmt.Errorf("procstat: pid %d: %w", pid, err)
	}
	return s, nil
}

// parseCPU is utime + stime of a /proc/<pid>/stat line. The command name
// (field 2) is in parentheses and may hold spaces or parentheses itself,
// so fields are counted from the last ')': state is field 3, utime 14,
// stime 15.
func parseCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("stat: no command name")
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command name, want at least 13", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat: cpu time %q: %w", s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// statusBytes is the "<key> <n> kB" line of /proc/<pid>/status, in bytes.
func statusBytes(status, key string) (int64, error) {
	for line := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("status %s %q: %w", key, v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("status: no %s line", key)
}
