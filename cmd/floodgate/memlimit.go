package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// memSize is the value of -max-memory: a size in bytes, with an optional
// KiB, MiB or GiB suffix, or "auto" (auto set), a share of the memory the
// process may use (autoMaxMemory).
type memSize struct {
	bytes int64
	auto  bool
}

func (m *memSize) String() string {
	if m.auto {
		return "auto"
	}
	return formatSize(m.bytes)
}

func (m *memSize) Set(s string) error {
	if strings.TrimSpace(s) == "auto" {
		*m = memSize{auto: true}
		return nil
	}
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*m = memSize{bytes: n}
	return nil
}

// resolve is the size in bytes: auto's derived bound, or the size set.
func (m memSize) resolve() int64 {
	if m.auto {
		return autoMaxMemory(processMemory())
	}
	return m.bytes
}

var sizeUnits = []struct {
	suffix string
	mult   int64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

// parseSize reads a count of bytes with an optional unit (B, KiB, MiB or
// GiB): "512MiB", "1GiB", "1048576".
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is not a size: a whole number of bytes, with an optional unit KiB, MiB or GiB (512MiB), or auto", s)
	}
	return n * mult, nil
}

// formatSize is n in the largest unit that divides it.
func formatSize(n int64) string {
	for _, u := range sizeUnits[:3] {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// autoMaxMemory is -max-memory auto for a process that may use limit
// bytes (0: unknown): a quarter of it, since the store's accounted bytes
// are live heap that the garbage collector lets grow to twice their size
// at GOGC 100, and the rest of the process (connections, buffers) needs
// room too; between 64 MiB and 4 GiB; 1 GiB when the limit is unknown.
func autoMaxMemory(limit int64) int64 {
	if limit <= 0 {
		return 1 << 30
	}
	return min(max(limit/4, 64<<20), 4<<30)
}

// processMemory is the memory the process may use: the least of
// GOMEMLIMIT (when set), its cgroup's limit (v2 memory.max, v1
// memory.limit_in_bytes) and the machine's memory (/proc/meminfo); 0 when
// none is known.
func processMemory() int64 {
	var least int64
	take := func(n int64) {
		if n > 0 && (least == 0 || n < least) {
			least = n
		}
	}
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		take(l)
	}
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if b, err := os.ReadFile(f); err == nil {
			if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n < 1<<60 {
				take(n)
			}
		}
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				fs := strings.Fields(rest)
				if len(fs) == 2 && fs[1] == "kB" {
					if n, err := strconv.ParseInt(fs[0], 10, 64); err == nil {
						take(n << 10)
					}
				}
				break
			}
		}
		f.Close()
	}
	return least
}
