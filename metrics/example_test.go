//go:build linux

package metrics_test

import (
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"omnishm/connector"
	"omnishm/metrics"
)

// A stage registers its connector's collector with one call; the registry
// then serves its figures (here gathered and printed instead).
func ExampleRegister() {
	conn, err := connector.Open(connector.Options{WakeupScope: fmt.Sprintf("example-metrics-%d", os.Getpid())})
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	reg := prometheus.NewRegistry()
	if _, err := metrics.Register(reg, conn); err != nil {
		log.Fatal(err)
	}
	if _, _, err := conn.Put("0", "1", "example-metrics-key", map[string]any{"n": 1}); err != nil {
		log.Fatal(err)
	}
	want := `# HELP omnishm_connector_puts_total Payloads published on an edge, by the path they took (ring or segment).
# TYPE omnishm_connector_puts_total counter
omnishm_connector_puts_total{from="0",path="ring",to="1"} 1
omnishm_connector_puts_total{from="0",path="segment",to="1"} 0
`
	fmt.Println(testutil.GatherAndCompare(reg, strings.NewReader(want), "omnishm_connector_puts_total"))
	// Output: <nil>
}
