//go:build linux

package bench_test

import (
	"context"
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

func ExampleRun() {
	payloads, err := bench.TensorPayloads([]int{512})
	if err != nil {
		fmt.Println(err)
		return
	}
	report, err := bench.Run(context.Background(), bench.Plan{
		Mode:       bench.Pair, // put then get in this process, beside the floor
		Payloads:   payloads,
		Transports: []string{bench.Ring, bench.UDS},
		Count:      50,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range report.Results {
		fmt.Println(r.Transport, bench.FormatSize(r.Size), r.Count, r.MeanUs > 0)
	}
	// Output:
	// ring 512 50 true
	// uds 512 50 true
	// memcpy 512 50 true
}
