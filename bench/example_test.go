package bench_test

import (
	"fmt"
	"os"
	"time"

	"omnishm/bench"
)

func Example() {
	sizes, _ := bench.ParseSizes("512,4KiB")
	var results []bench.Result
	for _, size := range sizes {
		results = append(results,
			bench.Summarize("ring", size, []time.Duration{10 * time.Microsecond, 12 * time.Microsecond}),
			bench.Summarize("uds", size, []time.Duration{20 * time.Microsecond, 24 * time.Microsecond}))
	}
	bench.CompareToUDS(results, "uds")
	fmt.Printf("%s ring p50 %.0fµs, %.1fx the socket\n", bench.FormatSize(results[2].Size), results[2].P50Us, *results[2].VsUDS)
	bench.Report{Mode: "latency", Results: results[:1]}.WriteJSON(os.Stdout)
	// Output:
	// 4KiB ring p50 10µs, 2.0x the socket
	// {"mode":"latency","results":[{"transport":"ring","size":512,"count":2,"mean_us":11,"p50_us":10,"p99_us":12,"msgs_per_s":90909.09090909091,"bytes_per_s":46545454.54545455,"vs_uds":2}]}
}
