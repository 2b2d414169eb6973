package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// run is everything one `make bench` left in its results directory.
type run struct {
	dir      string
	machine  map[string]string
	results  []Result
	failures map[string]string // "figure/runtime" -> reason
	// critest: runtime -> "file/operation" -> samples (ms)
	critest map[string]map[string][]float64
	scratch map[string][]float64 // critest "start a container from scratch", ms
	pull    map[string][]float64 // seconds
	logs    map[string][]logRun
	logCPU  map[string]map[string]float64 // runtime -> process name -> CPU s, summed over runs
}

type logRun struct{ linesPerSec, mbPerSec, journaldCPU, hostCPU float64 }

// The runtimes of a run: podunit and its two references, Debian's
// containerd 1.6 ("containerd") and containerd 2.x ("containerd2", built by
// test/bench/build-containerd2.sh). Every ratio is podunit's figure over the
// better of the references' figures in the same run.
var (
	runtimes = []string{"podunit", "containerd", "containerd2"}
	refs     = runtimes[1:]
	// logSeries adds podunit with journald off ([logs] journald = false)
	// to the log figure: the CRI file alone, as containerd writes it.
	logSeries = []string{"podunit", noJournal, "containerd", "containerd2"}
)

// better picks the reference figure podunit is compared with: of vals (one
// per reference, 0 when that one was not measured) the lowest when lower is
// better (latency, seconds), else the highest (throughput). It returns the
// figure and its index in vals, or 0 and -1 when none was measured.
func better(vals []float64, lowerWins bool) (float64, int) {
	best, at := 0.0, -1
	for i, v := range vals {
		if v <= 0 {
			continue
		}
		if at < 0 || (lowerWins && v < best) || (!lowerWins && v > best) {
			best, at = v, i
		}
	}
	return best, at
}

// noJournal is the log series of podunit with [logs] journald = false.
const noJournal = "podunit-nojournal"

// label names a runtime with the version this run measured.
func (r *run) label(rt string) string {
	if rt == noJournal {
		return "podunit, journald off"
	}
	if v := r.machine[rt]; v != "" && rt != "podunit" {
		return "containerd " + v
	}
	return rt
}

// short is a reference's major.minor version ("1.6", "2.4"), which names it
// beside a ratio; the runtime's name when the run did not record a version.
func (r *run) short(rt string) string {
	f := strings.SplitN(r.machine[rt], ".", 3)
	if len(f) < 2 {
		return rt
	}
	return f[0] + "." + f[1]
}

// ratioBest renders p over the better of the references' figures vals,
// followed by the version of the reference it was taken against: "0.85 (2.4)".
func (r *run) ratioBest(p float64, vals []float64, lowerWins bool) string {
	c, i := better(vals, lowerWins)
	if p <= 0 || i < 0 {
		return "–"
	}
	return fmt.Sprintf("%s (%s)", ratio(p, c), r.short(refs[i]))
}

func cmdReport(args []string) error {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	dir := fs.String("results", "", "results directory of a bench.sh run")
	out := fs.String("out", "", "markdown file to write")
	command := fs.String("command", "make bench", "the command line, as printed in the document")
	notes := fs.String("notes", "", "markdown appended verbatim (analysis written by hand), optional")
	fs.Parse(args)
	if *dir == "" || *out == "" {
		return fmt.Errorf("-results and -out are required")
	}
	r, err := loadRun(*dir)
	if err != nil {
		return err
	}
	var b strings.Builder
	r.render(&b, *command)
	if *notes != "" {
		n, err := os.ReadFile(*notes)
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		// hand-written analysis quotes one run's numbers: it goes under
		// that run's tables only
		switch {
		case err != nil:
		case strings.Contains(string(n), r.machine["date"]):
			b.WriteString("\n")
			b.Write(n)
		default:
			fmt.Fprintf(&b, "\n## Analysis\n\n%s holds a hand-written analysis of an earlier run; it quotes that run's "+
				"numbers, so it is not repeated under this one.\n", *notes)
		}
	}
	return os.WriteFile(*out, []byte(b.String()), 0o644)
}

func loadRun(dir string) (*run, error) {
	r := &run{dir: dir, machine: map[string]string{}, failures: map[string]string{},
		critest: map[string]map[string][]float64{}, scratch: map[string][]float64{},
		pull: map[string][]float64{}, logs: map[string][]logRun{},
		logCPU: map[string]map[string]float64{}}
	if err := eachLine(filepath.Join(dir, "machine.env"), func(l string) {
		if k, v, ok := strings.Cut(l, "="); ok {
			r.machine[k] = v
		}
	}); err != nil {
		return nil, err
	}
	if err := eachLine(filepath.Join(dir, "results.jsonl"), func(l string) {
		var res Result
		if json.Unmarshal([]byte(l), &res) == nil {
			r.results = append(r.results, res)
		}
	}); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	_ = eachLine(filepath.Join(dir, "failures.txt"), func(l string) {
		f := strings.SplitN(l, "\t", 3)
		if len(f) == 3 {
			r.failures[f[0]+"/"+f[1]] = f[2]
		}
	})
	for _, rt := range runtimes {
		r.critest[rt] = map[string][]float64{}
		dirs, _ := filepath.Glob(filepath.Join(dir, "critest-"+rt+"-*"))
		for _, d := range dirs {
			r.loadCritest(rt, d)
		}
		logs, _ := filepath.Glob(filepath.Join(dir, "pull-"+rt+"-*.log"))
		for _, f := range logs {
			_ = eachLine(f, func(l string) {
				// "podunit      runs: 1.234 1.456 "
				f := strings.Fields(l)
				if len(f) > 2 && f[0] == rt && f[1] == "runs:" {
					for _, v := range f[2:] {
						if x, err := strconv.ParseFloat(v, 64); err == nil {
							r.pull[rt] = append(r.pull[rt], x)
						}
					}
				}
			})
		}
	}
	for _, rt := range logSeries {
		logs, _ := filepath.Glob(filepath.Join(dir, "logs-"+rt+"-*.log"))
		for _, f := range logs {
			_ = eachLine(f, func(l string) {
				// "NAME run R  X s  L lines/s  M MB/s  host CPU C s  journald CPU J s"
				f := strings.Fields(l)
				if len(f) == 4 && f[0] == "cpu" && f[1] == rt {
					x, _ := strconv.ParseFloat(f[3], 64)
					if r.logCPU[rt] == nil {
						r.logCPU[rt] = map[string]float64{}
					}
					r.logCPU[rt][f[2]] += x
				}
				if len(f) >= 17 && f[0] == rt && f[1] == "run" && f[6] == "lines/s" {
					num := func(i int) float64 { x, _ := strconv.ParseFloat(f[i], 64); return x }
					r.logs[rt] = append(r.logs[rt], logRun{num(5), num(7), num(15), num(11)})
				}
			})
		}
	}
	return r, nil
}

func (r *run) loadCritest(rt, d string) {
	files, _ := filepath.Glob(filepath.Join(d, "data", "*.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var set struct {
			OperationsNames []string `json:"operationsNames"`
			Datapoints      []struct {
				Durations []int64 `json:"operationsDurationsNs"`
			} `json:"datapoints"`
		}
		if json.Unmarshal(b, &set) != nil {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		for i, op := range set.OperationsNames {
			key := name + "/" + op
			for _, dp := range set.Datapoints {
				if i < len(dp.Durations) {
					r.critest[rt][key] = append(r.critest[rt][key], float64(dp.Durations[i])/1e6)
				}
			}
		}
	}
	// the from-scratch timing is a gmeasure experiment in the ginkgo report
	reports, _ := filepath.Glob(filepath.Join(d, "report*.json"))
	for _, f := range reports {
		r.loadScratch(rt, f)
	}
}

func (r *run) loadScratch(rt, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var rep []struct {
		SpecReports []struct {
			ReportEntries []struct {
				Name  string `json:"Name"`
				Value struct {
					AsJSON string `json:"AsJSON"`
				} `json:"Value"`
			} `json:"ReportEntries"`
		} `json:"SpecReports"`
	}
	if json.Unmarshal(b, &rep) != nil {
		return
	}
	for _, s := range rep {
		for _, sr := range s.SpecReports {
			for _, e := range sr.ReportEntries {
				if e.Name != "start-container-benchmark" {
					continue
				}
				var exp struct {
					Measurements []struct {
						Name      string          `json:"Name"`
						Durations []time.Duration `json:"Durations"`
					} `json:"Measurements"`
				}
				if json.Unmarshal([]byte(e.Value.AsJSON), &exp) != nil {
					continue
				}
				for _, m := range exp.Measurements {
					for _, d := range m.Durations {
						r.scratch[rt] = append(r.scratch[rt], ms(d))
					}
				}
			}
		}
	}
}

func eachLine(path string, fn func(string)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		fn(sc.Text())
	}
	return sc.Err()
}

// samples of one kind/series for a runtime, over every round; params must match.
func (r *run) samples(kind, rt, series string, params map[string]string) []float64 {
	var out []float64
	for _, res := range r.results {
		if res.Kind != kind || res.Runtime != rt {
			continue
		}
		ok := true
		for k, v := range params {
			if res.Params[k] != v {
				ok = false
			}
		}
		if ok {
			out = append(out, res.Samples[series]...)
		}
	}
	return out
}

// densityShapes are the density figure's pod shapes, containers per pod:
// one, and three, which is fair to containerd's shim (one per pod, serving
// every container of it).
var densityShapes = []int{1, 3}

// perPod is a density result's pod shape: its per_pod param, 1 when there is
// none (results from before the parameter measured one container per pod), 0
// when it is unreadable (no shape).
func perPod(res Result) int {
	v, ok := res.Params["per_pod"]
	if !ok {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0
	}
	return n
}

// densityFig names the density figure of a pod shape in failures.txt, as
// bench.sh does: "density" for one container per pod, "density-N" for N.
func densityFig(perPod int) string {
	if perPod == 1 {
		return "density"
	}
	return "density-" + strconv.Itoa(perPod)
}

// densityResult is a runtime's density result of a pod shape, or nil.
func (r *run) densityResult(rt string, n int) *Result {
	for i, res := range r.results {
		if res.Kind == "density" && res.Runtime == rt && perPod(res) == n {
			return &r.results[i]
		}
	}
	return nil
}

// density is the points of a runtime's density result of a pod shape.
func (r *run) density(rt string, n int) []DensityPoint {
	if res := r.densityResult(rt, n); res != nil {
		return res.Density
	}
	return nil
}

func (r *run) idle(key string) (float64, bool) {
	for _, res := range r.results {
		if res.Kind == "idle" {
			if v, err := strconv.ParseFloat(res.Params[key], 64); err == nil {
				return v, true
			}
		}
	}
	return 0, false
}

// missing explains an empty figure: the failure recorded for it, or "not run".
func (r *run) missing(fig, rt string) string {
	if why, ok := r.failures[fig+"/"+rt]; ok {
		why = strings.TrimPrefix(why, "cribench: ")
		if i := strings.Index(why, "rpc error: code = "); i >= 0 {
			why = why[:i] + why[i+len("rpc error: code = "):]
			why = strings.Replace(why, " desc = ", ": ", 1)
		}
		return "not measured: " + mdEscape(why)
	}
	return "not measured: not run"
}

func mdEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", "\\|"), "\n", " ")
}

func median(v []float64) float64 { return percentile(v, 50) }

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func ratio(p, c float64) string {
	if c == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", p/c)
}

func f1(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }

// cell renders p50/p95/p99 of samples, or the reason they are missing.
func pcts(v []float64, unit string) string {
	return fmt.Sprintf("%s / %s / %s %s (n=%d)", f1(percentile(v, 50)), f1(percentile(v, 95)), f1(percentile(v, 99)), unit, len(v))
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}
