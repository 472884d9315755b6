package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// ghzOutput is the part of `ghz --format json` the report reads.
type ghzOutput struct {
	Total   time.Duration `json:"total"`
	Details []struct {
		Timestamp time.Time     `json:"timestamp"`
		Latency   time.Duration `json:"latency"`
		Error     string        `json:"error"`
		Status    string        `json:"status"`
	} `json:"details"`
}

func ghzReport(args []string) error {
	fs := flag.NewFlagSet("ghz-report", flag.ContinueOnError)
	kill := fs.Int64("kill", 0, "when a backend was killed, in Unix nanoseconds (0: none)")
	window := fs.Duration("window", 250*time.Millisecond, "throughput window")
	hang := fs.Duration("hang", 10*time.Second, "a request at least this slow counts as hung")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 || (*kill != 0 && fs.NArg() != 1) {
		return fmt.Errorf("ghz-report needs ghz JSON files (one with --kill)")
	}
	// Several files (segments of one measurement) add up.
	var out ghzOutput
	for _, f := range fs.Args() {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var o ghzOutput
		if err := json.Unmarshal(data, &o); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if len(o.Details) == 0 {
			return fmt.Errorf("%s has no per-request details", f)
		}
		out.Total += o.Total
		out.Details = append(out.Details, o.Details...)
	}
	d := out.Details
	sort.Slice(d, func(i, j int) bool { return d[i].Timestamp.Before(d[j].Timestamp) })
	status := map[string]int{}
	errs := map[string]int{}
	var lat []time.Duration
	hung := 0
	for _, r := range d {
		status[r.Status]++
		if r.Error != "" {
			errs[r.Error]++
		}
		if r.Latency >= *hang || r.Status == "DeadlineExceeded" {
			hung++
		}
		lat = append(lat, r.Latency)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration { return lat[min(int(p*float64(len(lat))), len(lat)-1)] }
	fmt.Printf("requests %d in %.1f s: %.1f/s answered OK\n", len(d), out.Total.Seconds(), float64(status["OK"])/out.Total.Seconds())
	fmt.Printf("status %v\n", status)
	fmt.Printf("latency p50 %v p90 %v p99 %v max %v\n", pct(0.5), pct(0.9), pct(0.99), lat[len(lat)-1])
	fmt.Printf("hung (≥ %v or deadline exceeded): %d\n", *hang, hung)
	clear, unclear := 0, 0
	for msg, n := range errs {
		fmt.Printf("error ×%d: %s\n", n, msg)
		if strings.Contains(msg, "code = Unavailable") && strings.Contains(msg, `backend \"`) {
			clear += n
		} else {
			unclear += n
		}
	}
	if clear+unclear > 0 {
		fmt.Printf("failures: %d UNAVAILABLE naming the backend, %d other\n", clear, unclear)
	}
	okRate := float64(status["OK"]) / out.Total.Seconds()
	fmt.Printf("p50_ms=%.4f rps=%.2f ok=%d errors=%d hung=%d seconds=%.1f\n", float64(pct(0.5))/1e6, okRate, status["OK"], len(d)-status["OK"], hung, out.Total.Seconds())
	if *kill == 0 {
		return nil
	}
	// Throughput by completion time, in windows around the kill.
	killAt := time.Unix(0, *kill)
	start := d[0].Timestamp
	end := d[len(d)-1].Timestamp
	done := func(i int) time.Time { return d[i].Timestamp.Add(d[i].Latency) }
	nw := int(end.Sub(start)/(*window)) + 2
	okPer := make([]int, nw)
	for i, r := range d {
		if r.Status == "OK" {
			if w := int(done(i).Sub(start) / *window); w >= 0 && w < nw {
				okPer[w]++
			}
		}
	}
	kw := int(killAt.Sub(start) / *window)
	if kw < 2 || kw >= nw-2 {
		return fmt.Errorf("the kill is not inside the run")
	}
	var before float64
	for w := 1; w < kw; w++ { // the first window is warm-up
		before += float64(okPer[w])
	}
	before /= float64(kw - 1)
	fmt.Printf("answered per %v before the kill: %.1f\n", *window, before)
	fmt.Print("answered per window from the kill:")
	for w := kw; w < min(kw+12, nw-1); w++ {
		fmt.Printf(" %d", okPer[w])
	}
	fmt.Println()
	// Recovered: the first window that starts after the kill and, with the
	// three after it (one second at the default window), averages at least
	// 80% of the rate before the kill (single windows are noisy on a
	// shared machine).
	for w := kw + 1; w+4 <= nw-1; w++ {
		sum := 0
		for k := w; k < w+4; k++ {
			sum += okPer[k]
		}
		if float64(okPer[w]) >= 0.8*before && float64(sum)/4 >= 0.8*before {
			fmt.Printf("throughput back to >= 80%% of before %.2f s after the kill (the end of the first such window)\n", start.Add(time.Duration(w+1)**window).Sub(killAt).Seconds())
			return nil
		}
	}
	fmt.Println("throughput did not get back to 80% of before")
	return nil
}
