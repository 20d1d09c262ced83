package main

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/braidmq/braid/benchmarks/workload"
)

// A row is one workload, measured by its cells in every round.
type row struct {
	name   string
	detail string
	cells  []cell // in the order a round runs them
}

// A cell is one system's measurement of a row. Each run starts a new node
// or server in a new directory.
type cell struct {
	col string
	run func() (workload.Result, error)
}

// rowResult holds a row's results, round by round, per column.
type rowResult struct {
	name   string
	rounds int
	cells  map[string][]workload.Result
}

// A ratio is num's rate over den's, computed per round.
type ratio struct {
	num, den string
	note     string // what the two acknowledge after
}

func (q ratio) String() string { return q.num + " / " + q.den }

// perRound returns the ratio of each round, or nil if the row lacks one of
// the columns.
func (q ratio) perRound(r rowResult) []float64 {
	a, b := r.cells[q.num], r.cells[q.den]
	if len(a) == 0 || len(b) == 0 {
		return nil
	}
	var out []float64
	for i := range min(len(a), len(b)) {
		if d := b[i].Rate(); d > 0 {
			out = append(out, a[i].Rate()/d)
		} else {
			out = append(out, math.Inf(1))
		}
	}
	return out
}

// measure runs the row's cells in turn, rounds times, printing each result
// as it comes, then the row's per-round rates and ratios.
func (r row) measure(rounds int) rowResult {
	fmt.Printf("%s: %s\n", r.name, r.detail)
	res := rowResult{name: r.name, rounds: rounds, cells: map[string][]workload.Result{}}
	for i := range rounds {
		fmt.Printf("  round %d/%d\n", i+1, rounds)
		for _, c := range r.cells {
			// The previous run's garbage is not this run's to collect.
			runtime.GC()
			out, err := c.run()
			check(err)
			res.cells[c.col] = append(res.cells[c.col], out)
			fmt.Printf("    %-22s %s\n", c.col, cellText(out))
		}
		var parts []string
		for _, q := range ratios {
			if v := q.perRound(res); len(v) > i {
				parts = append(parts, fmt.Sprintf("%s %s", q, times(v[i])))
			}
		}
		fmt.Printf("    %s\n", strings.Join(parts, "; "))
	}
	fmt.Printf("  %s, %d rounds:\n", r.name, rounds)
	for _, c := range r.cells {
		var rates []string
		for _, out := range res.cells[c.col] {
			rates = append(rates, fmt.Sprintf("%8.0f", out.Rate()))
		}
		fmt.Printf("    %-38s %s msg/s\n", c.col, strings.Join(rates, "  "))
	}
	for _, q := range ratios {
		v := q.perRound(res)
		if v == nil {
			continue
		}
		var each []string
		for _, x := range v {
			each = append(each, fmt.Sprintf("%8s", times(x)))
		}
		lo, hi := slices.Min(v), slices.Max(v)
		fmt.Printf("    %-38s %s   median %s, spread %s-%s\n", q, strings.Join(each, "  "), times(median(v)), times(lo), times(hi))
	}
	fmt.Println()
	return res
}

// cellText is a result's rate, latency, errors and note.
func cellText(res workload.Result) string {
	s := fmt.Sprintf("%9.0f msg/s", res.Rate())
	if res.P99 > 0 {
		s += fmt.Sprintf("  p50/p99 %s/%s", short(res.P50), short(res.P99))
	}
	if res.Errors > 0 {
		s += fmt.Sprintf("  %d ERRORS", res.Errors)
	}
	if c := res.CPU.PerMessage(res.Messages); c != "" {
		s += "  " + c
	}
	if res.Note != "" {
		s += "  " + res.Note
	}
	return s
}

// printMedians prints the rows as one table: each cell is the median over
// the rounds of its rate, p50 and p99 (each taken on its own), with the
// errors of all rounds; the last column is the headline ratio's median and
// spread.
func printMedians(rows []rowResult) {
	fmt.Printf("medians over the rounds (msg/s; p50/p99):\n")
	fmt.Printf("%-28s", "workload")
	for _, c := range cols {
		fmt.Printf(" | %-26s", c)
	}
	fmt.Printf(" | %s\n", ratios[0])
	fmt.Println(strings.Repeat("-", 28+4*29+3+len(ratios[0].String())))
	for _, r := range rows {
		fmt.Printf("%-28s", r.name)
		for _, c := range cols {
			text := "-"
			if rs := r.cells[c]; len(rs) > 0 {
				var rates, p50s, p99s []float64
				errs := 0
				for _, res := range rs {
					rates = append(rates, res.Rate())
					p50s = append(p50s, float64(res.P50))
					p99s = append(p99s, float64(res.P99))
					errs += res.Errors
				}
				text = fmt.Sprintf("%.0f", median(rates))
				if p99 := median(p99s); p99 > 0 {
					text += fmt.Sprintf(" (%s/%s)", short(durationOf(median(p50s))), short(durationOf(p99)))
				}
				if errs > 0 {
					text += fmt.Sprintf(" %d ERR", errs)
				}
			}
			fmt.Printf(" | %-26s", text)
		}
		fmt.Printf(" | %s\n", spread(ratios[0].perRound(r)))
	}
}

// printSummary prints each row's ratios: median [min, max] of the rounds.
func printSummary(rows []rowResult) {
	fmt.Printf("summary: Braid / JetStream msg/s, ratio per round, median [min, max] over %d rounds\n", rows[0].rounds)
	widths := make([]int, len(ratios))
	fmt.Printf("%-28s", "workload")
	for i, q := range ratios {
		widths[i] = max(len(q.String()), 22)
		fmt.Printf(" | %-*s", widths[i], q)
	}
	fmt.Println()
	n := 28
	for _, w := range widths {
		n += 3 + w
	}
	fmt.Println(strings.Repeat("-", n))
	for _, r := range rows {
		fmt.Printf("%-28s", r.name)
		var cells []string
		for i, q := range ratios {
			cells = append(cells, fmt.Sprintf("%-*s", widths[i], spread(q.perRound(r))))
		}
		fmt.Println(strings.TrimRight(" | "+strings.Join(cells, " | "), " "))
	}
	for _, q := range ratios {
		fmt.Printf("  %s: %s\n", q, q.note)
	}
}

// spread formats ratios as "median [min, max]", or "-" if there are none.
func spread(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	return fmt.Sprintf("%s [%s, %s]", times(median(v)), times(slices.Min(v)), times(slices.Max(v)))
}

// times formats a ratio with about three significant digits.
func times(x float64) string {
	switch {
	case x < 10:
		return fmt.Sprintf("%.2fx", x)
	case x < 100:
		return fmt.Sprintf("%.1fx", x)
	default:
		return fmt.Sprintf("%.0fx", x)
	}
}

// median of v: the middle value, or the mean of the middle two.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

func durationOf(ns float64) time.Duration { return time.Duration(math.Round(ns)) }

// printServerCPU prints, for each row and column, the median over the
// rounds of the CPU time per message of the server process and of this
// program (the client), in µs, from the runs that measured it.
func printServerCPU(rows []rowResult) {
	fmt.Printf("CPU per message, median over the rounds (µs: server process / client):\n")
	fmt.Printf("%-28s", "workload")
	for _, c := range cols {
		fmt.Printf(" | %-26s", c)
	}
	fmt.Println()
	fmt.Println(strings.Repeat("-", 28+4*29))
	for _, r := range rows {
		fmt.Printf("%-28s", r.name)
		for _, c := range cols {
			var server, client []float64
			for _, res := range r.cells[c] {
				if res.CPU.Measured && !res.CPU.Shared && res.Messages > 0 {
					n := float64(res.Messages)
					server = append(server, float64(res.CPU.Server)/float64(time.Microsecond)/n)
					client = append(client, float64(res.CPU.Client)/float64(time.Microsecond)/n)
				}
			}
			text := "-"
			if len(server) > 0 {
				text = fmt.Sprintf("%.1f / %.1f", median(server), median(client))
			}
			fmt.Printf(" | %-26s", text)
		}
		fmt.Println()
	}
}
