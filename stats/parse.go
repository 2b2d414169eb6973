package stats

import (
	"bufio"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/podunit/podunit/errdefs"
)

// The parsers below are pure functions over a cgroup or procfs file's
// contents, so they are table-tested against files captured from real hosts
// and fuzzed; everything that touches the filesystem lives elsewhere.

// v1Unlimited is the smallest value a v1 limit file shows when no limit is
// set: the kernel prints PAGE_COUNTER_MAX pages rounded to a page, which is
// 9223372036854771712 on 4 KiB pages. Anything at or above it means "none".
const v1Unlimited = uint64(1) << 62

// ParseFlatKeyed parses "key value" lines (cpu.stat, memory.stat,
// memory.events, memory.oom_control, cpuacct.stat). Values that are not
// unsigned integers are an error: these files never contain them.
func ParseFlatKeyed(s string) (map[string]uint64, error) {
	out := make(map[string]uint64)
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, " ")
		if !ok || k == "" {
			return nil, fmt.Errorf("flat-keyed line %q: %w", line, errdefs.ErrInvalid)
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("flat-keyed line %q: %w", line, errdefs.ErrInvalid)
		}
		out[k] = n
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("flat-keyed file: %v: %w", err, errdefs.ErrInvalid)
	}
	return out, nil
}

// ParseUint parses a single-value file (memory.current, cpuacct.usage).
func ParseUint(s string) (uint64, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("single-value file %q: %w", truncate(s), errdefs.ErrInvalid)
	}
	return n, nil
}

// ParseLimit parses a limit file of either version: v2's "max" and v1's
// page-counter maximum both mean unlimited and return 0.
func ParseLimit(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	if t == "max" {
		return 0, nil
	}
	n, err := ParseUint(t)
	if err != nil {
		return 0, err
	}
	if n >= v1Unlimited {
		return 0, nil
	}
	return n, nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// InterfaceStats is one line of /proc/net/dev.
type InterfaceStats struct {
	Name                                    string
	RxBytes, RxPackets, RxErrors, RxDropped uint64
	TxBytes, TxPackets, TxErrors, TxDropped uint64
}

// ParseNetDev parses /proc/net/dev: two header lines, then
// "iface: rx_bytes rx_packets rx_errs ... (8 rx fields) tx_bytes tx_packets tx_errs ...".
func ParseNetDev(s string) ([]InterfaceStats, error) {
	var out []InterfaceStats
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue // header lines have no colon
		}
		name = strings.TrimSpace(name)
		f := strings.Fields(rest)
		if name == "" || len(f) < 16 {
			return nil, fmt.Errorf("net/dev line %q: %w", truncate(line), errdefs.ErrInvalid)
		}
		var n [16]uint64
		for i := range n {
			v, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("net/dev line %q: %w", truncate(line), errdefs.ErrInvalid)
			}
			n[i] = v
		}
		out = append(out, InterfaceStats{
			Name:    name,
			RxBytes: n[0], RxPackets: n[1], RxErrors: n[2], RxDropped: n[3],
			TxBytes: n[8], TxPackets: n[9], TxErrors: n[10], TxDropped: n[11],
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("net/dev: %v: %w", err, errdefs.ErrInvalid)
	}
	return out, nil
}

// ParseCgroupMounts reads /proc/self/mountinfo and returns the mount point
// of every cgroup v1 controller (keyed by controller name, "name=systemd"
// included) and the cgroup2 mount point, if any. A hierarchy that carries
// several controllers ("cpu,cpuacct") is listed under each of them.
func ParseCgroupMounts(s string) (v1 map[string]string, v2 string, err error) {
	v1 = make(map[string]string)
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || len(f) < sep+4 {
			if len(f) == 0 {
				continue
			}
			return nil, "", fmt.Errorf("mountinfo line %q: %w", truncate(sc.Text()), errdefs.ErrInvalid)
		}
		mp, fstype := unescapeMount(f[4]), f[sep+1]
		switch fstype {
		case "cgroup2":
			if v2 == "" {
				v2 = mp
			}
		case "cgroup":
			for _, o := range strings.Split(f[sep+3], ",") {
				if o == "rw" || o == "ro" || strings.HasPrefix(o, "release_agent=") || o == "clone_children" || o == "noprefix" || o == "xattr" {
					continue
				}
				if _, dup := v1[o]; !dup {
					v1[o] = mp
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, "", fmt.Errorf("mountinfo: %v: %w", err, errdefs.ErrInvalid)
	}
	return v1, v2, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ParseSchedstat returns the first field of /proc/<pid>/task/<tid>/schedstat:
// nanoseconds the task spent on a CPU.
func ParseSchedstat(s string) (uint64, error) {
	f := strings.Fields(s)
	if len(f) < 1 {
		return 0, fmt.Errorf("schedstat %q: %w", truncate(s), errdefs.ErrInvalid)
	}
	return ParseUint(f[0])
}

// ParseCPUMax parses v2 cpu.max ("max 100000" or "20000 100000"): quota is
// -1 when unlimited.
func ParseCPUMax(s string) (quotaUsec int64, periodUsec uint64, err error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("cpu.max %q: %w", truncate(s), errdefs.ErrInvalid)
	}
	periodUsec, err = ParseUint(f[1])
	if err != nil {
		return 0, 0, err
	}
	if f[0] == "max" {
		return -1, periodUsec, nil
	}
	q, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || q < 0 {
		return 0, 0, fmt.Errorf("cpu.max %q: %w", truncate(s), errdefs.ErrInvalid)
	}
	return q, periodUsec, nil
}

// WeightToShares maps v2 cpu.weight (1..10000) to the v1 cpu.shares scale
// (2..262144) the way runc and the kubelet convert the other direction,
// so cAdvisor-style spec metrics read the same on both versions.
func WeightToShares(weight uint64) uint64 {
	if weight == 0 {
		return 0
	}
	return 2 + (weight-1)*262142/9999
}

// userHZ is the kernel's USER_HZ, the unit of cpuacct.stat; 100 on every
// Linux architecture podunit runs on.
const userHZ = 100

// ParseCPUAcctStat parses v1 cpuacct.stat into user and system nanoseconds.
func ParseCPUAcctStat(s string) (userNs, systemNs uint64, err error) {
	m, err := ParseFlatKeyed(s)
	if err != nil {
		return 0, 0, err
	}
	return m["user"] * (1e9 / userHZ), m["system"] * (1e9 / userHZ), nil
}

// PSIData is one line of a pressure file: the share of wall time (in
// percent) that tasks stalled on the resource over the last 10, 60 and 300
// seconds, and the cumulative stall time.
type PSIData struct {
	Avg10, Avg60, Avg300 float64
	// TotalNanos is the kernel's total (microseconds) in nanoseconds, the
	// unit the CRI's PsiData.Total carries.
	TotalNanos uint64
}

// PSIStats is a parsed cpu.pressure, memory.pressure or io.pressure file.
// Some covers time at least one task stalled, Full time all non-idle tasks
// stalled at once. Full is nil when the file has no "full" line: cpu.pressure
// only has one since Linux 5.13.
type PSIStats struct {
	Some, Full *PSIData
}

// ParsePressure parses a PSI file, lines of the form
// "some avg10=0.00 avg60=0.00 avg300=0.00 total=0" (Documentation/accounting/psi.rst).
// Each line must carry all four fields; keys the kernel may add later are
// skipped, so a newer kernel does not make the whole file unreadable. A
// file without a "some" line is malformed: every PSI file has one.
func ParsePressure(s string) (*PSIStats, error) {
	out := &PSIStats{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		var dst **PSIData
		switch f[0] {
		case "some":
			dst = &out.Some
		case "full":
			dst = &out.Full
		default:
			return nil, fmt.Errorf("pressure line %q: unknown kind: %w", truncate(sc.Text()), errdefs.ErrInvalid)
		}
		if *dst != nil {
			return nil, fmt.Errorf("pressure line %q: second %s line: %w", truncate(sc.Text()), f[0], errdefs.ErrInvalid)
		}
		d, err := parsePSILine(f[1:])
		if err != nil {
			return nil, fmt.Errorf("pressure line %q: %w", truncate(sc.Text()), err)
		}
		*dst = d
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("pressure file: %v: %w", err, errdefs.ErrInvalid)
	}
	if out.Some == nil {
		return nil, fmt.Errorf("pressure file %q has no \"some\" line: %w", truncate(s), errdefs.ErrInvalid)
	}
	return out, nil
}

// maxPSITotalUsec keeps the conversion to nanoseconds from overflowing.
const maxPSITotalUsec = ^uint64(0) / 1000

func parsePSILine(fields []string) (*PSIData, error) {
	d := &PSIData{}
	const (
		avg10 = 1 << iota
		avg60
		avg300
		total
		all = avg10 | avg60 | avg300 | total
	)
	seen := 0
	for _, kv := range fields {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("field %q is not key=value: %w", kv, errdefs.ErrInvalid)
		}
		var bit int
		switch k {
		case "avg10":
			bit = avg10
		case "avg60":
			bit = avg60
		case "avg300":
			bit = avg300
		case "total":
			bit = total
		default:
			continue
		}
		if seen&bit != 0 {
			return nil, fmt.Errorf("field %s twice: %w", k, errdefs.ErrInvalid)
		}
		seen |= bit
		if bit == total {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil || n > maxPSITotalUsec {
				return nil, fmt.Errorf("total %q: %w", v, errdefs.ErrInvalid)
			}
			d.TotalNanos = n * 1000
			continue
		}
		// The kernel prints averages as "%lu.%02lu" percent; NaN, Inf
		// or a sign are not something it writes.
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || !(x >= 0) || math.IsInf(x, 1) {
			return nil, fmt.Errorf("%s %q: %w", k, v, errdefs.ErrInvalid)
		}
		switch bit {
		case avg10:
			d.Avg10 = x
		case avg60:
			d.Avg60 = x
		case avg300:
			d.Avg300 = x
		}
	}
	if seen != all {
		return nil, fmt.Errorf("missing avg10, avg60, avg300 or total: %w", errdefs.ErrInvalid)
	}
	return d, nil
}
