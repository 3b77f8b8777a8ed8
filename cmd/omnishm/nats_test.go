//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"omnishm/internal/shmtest"
	"omnishm/internal/vectortest"
	"omnishm/natsconn"
)

// natsServer starts a NATS server in the test process, JetStream in a
// directory of the test's, and returns its URL; it stops when the test ends.
func natsServer(t *testing.T) string {
	t.Helper()
	url, stop, err := natsconn.StartEmbedded(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return url
}

// natsConfig writes a configuration whose one connector is a NatsConnector
// of url and returns its path.
func natsConfig(t *testing.T, url string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "omnishm.yaml")
	text := "connectors:\n  remote:\n    name: NatsConnector\n    extra:\n      url: " + url + "\n      timeout: 10s\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Payloads made by the Python reference cross NATS as they cross /dev/shm:
// send names the entry in a nats descriptor and stays until recv claimed
// it. send reads the server from a configuration file, recv from --url.
func TestNatsSendRecvRoundTrip(t *testing.T) {
	url := natsServer(t)
	cfg := natsConfig(t, url)
	for i, c := range []string{"tree_float32", "tree_bfloat16", "typed_payload", "scalars"} {
		payload := vectortest.Read(t, c+".json")
		key := shmtest.Key(c)
		send := startCLI(t, payload, "send", "--config", cfg, "--from", "0", "--to", "1", "--key", key)
		desc := send.line(t)
		var d struct {
			Nats *struct {
				Bucket, Key string
				Revision    uint64
			} `json:"nats"`
		}
		if err := json.Unmarshal([]byte(desc), &d); err != nil || d.Nats == nil || d.Nats.Bucket != natsconn.DefaultBucket ||
			d.Nats.Key != natsconn.EncodeKey("0", "1", key) || d.Nats.Revision == 0 {
			t.Fatalf("%s: descriptor %s (%v)", c, desc, err)
		}
		args := []string{"recv", "--transport", "nats", "--url", url, "--from", "0", "--to", "1", "--key", key}
		if i%2 == 1 {
			args = append(args, "--descriptor", desc)
		}
		r := omnishm(t, nil, args...)
		r.wantSuccess(t)
		if got, want := canonical(t, r.stdout), canonical(t, payload); got != want {
			t.Errorf("%s: received\n%s\nwant\n%s", c, got, want)
		}
		if code := send.wait(t); code != exitOK {
			t.Errorf("%s: send exited %d after the claim; stderr %q", c, code, send.errText())
		}
	}
}

func TestNatsRecvTimeout(t *testing.T) {
	url := natsServer(t)
	r := omnishm(t, nil, "recv", "--transport", "nats", "--url", url, "--from", "0", "--to", "1", "--key", shmtest.Key("never"), "--timeout", "100ms")
	r.wantFailure(t, exitFail, "within 100ms")
	// It says where it looked and what the server holds there.
	r.wantFailure(t, exitFail, `within 100ms (bucket "omnishm", stream KV_omnishm, subject $KV.omnishm.0.1.`)
	r.wantFailure(t, exitFail, "; saw no entry for the key, no unclaimed publication of another key on the edge")
}

// An unclaimed publication is retired when --wait runs out: a later recv
// finds nothing.
func TestNatsSendWaitExpiryRetires(t *testing.T) {
	url := natsServer(t)
	key := shmtest.Key("expire")
	send := startCLI(t, []byte(`{"x": [1, 2.5, "three"]}`), "send", "--transport", "nats", "--url", url,
		"--from", "0", "--to", "1", "--key", key, "--wait", "300ms")
	send.line(t)
	if code := send.wait(t); code != exitUnclaimed {
		t.Fatalf("send exited %d, want %d (stderr %q)", code, exitUnclaimed, send.errText())
	}
	if !strings.Contains(send.errText(), "publication retired") {
		t.Errorf("stderr %q does not say the publication was retired", send.errText())
	}
	r := omnishm(t, nil, "recv", "--transport", "nats", "--url", url, "--from", "0", "--to", "1", "--key", key, "--timeout", "200ms")
	r.wantFailure(t, exitFail, "nothing received")
}

// bench times nats beside the socket, over a server it runs itself or the
// one --url names; the report has the shape of the shared-memory ones.
func TestNatsBench(t *testing.T) {
	url := natsServer(t)
	for _, c := range []struct {
		mode  string
		top   []string
		extra map[string][]string
		args  []string
	}{
		{"latency", nil, map[string][]string{"*": {"send_p50_us"}}, nil}, // the put's (the write's) own p50
		// No flock ratios for nats: it locks nothing in /dev/shm.
		{"pair", []string{"flock"}, map[string][]string{"uds": {"flock_p50_us", "flock_ratio", "floor_ratio"}}, []string{"--url", url}},
		{"stream", nil, map[string][]string{"*": {"window"}}, []string{"--config", natsConfig(t, url)}},
	} {
		t.Run(c.mode, func(t *testing.T) {
			args := append([]string{"--count", "3", "--sizes", "512,4KiB", "--transports", "nats,uds"}, c.args...)
			top := slices.Sorted(slices.Values(append(c.top, "mode", "results")))
			res := benchJSON(t, c.mode, top, c.extra, args...).Results
			want := []benchRow{{"nats", 512}, {"nats", 4096}, {"uds", 512}, {"uds", 4096}, {"memcpy", 512}, {"memcpy", 4096}}
			if got := rows(res); !slices.Equal(got, want) {
				t.Fatalf("rows %v, want %v", got, want)
			}
			if c.mode != "pair" && res[0]["vs_uds"] == nil {
				t.Errorf("nats not compared to the socket: %v", res[0])
			}
		})
	}
}

func TestNatsDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four processes")
	}
	r := omnishm(t, nil, "demo", "--transport", "nats", "--requests", "2", "--chunks", "4", "--out", t.TempDir())
	if r.code != exitOK {
		t.Fatalf("demo: %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"over NATS at nats://127.0.0.1:", "(embedded)", "chunks/s", "claims lost 0", "/dev/shm          clean"} {
		if !strings.Contains(string(r.stdout), want) {
			t.Errorf("report lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestTransportUsageErrors(t *testing.T) {
	dir := t.TempDir()
	shmOnly := filepath.Join(dir, "shm.yaml")
	two := filepath.Join(dir, "two.yaml")
	os.WriteFile(shmOnly, []byte("connectors:\n  local:\n    name: SharedMemoryConnector\n    extra: {host_ring_bytes: 0}\n"), 0o600)
	os.WriteFile(two, []byte("connectors:\n  a:\n    name: NatsConnector\n  b:\n    name: NatsConnector\n"), 0o600)
	edge := []string{"--from", "0", "--to", "1", "--key", "k"}
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{append([]string{"send", "--transport", "tcp"}, edge...), exitUsage, `--transport "tcp": want shm or nats`},
		{append([]string{"recv", "--transport", "tcp"}, edge...), exitUsage, `--transport "tcp"`},
		{[]string{"demo", "--transport", "tcp"}, exitUsage, `--transport "tcp"`},
		{append([]string{"send", "--url", "nats://127.0.0.1:1"}, edge...), exitUsage, "--url is for --transport nats"},
		{append([]string{"recv", "--transport", "shm", "--url", "nats://127.0.0.1:1"}, edge...), exitUsage, "--url is for --transport nats"},
		{[]string{"demo", "--url", "nats://127.0.0.1:1"}, exitUsage, "--url is for --transport nats"},
		{append([]string{"recv", "--transport", "nats", "--ring-bytes", "0"}, edge...), exitUsage, "--ring-bytes is for --transport shm"},
		{append([]string{"send", "--transport", "nats", "--scope", "s"}, edge...), exitUsage, "--scope is for --transport shm"},
		{[]string{"demo", "--transport", "nats", "--ring-bytes", "0"}, exitUsage, "--ring-bytes is for --transport shm"},
		{append([]string{"send", "--connector", "a"}, edge...), exitUsage, "--connector needs --config"},
		{append([]string{"send", "--transport", "nats", "--config", shmOnly}, edge...), exitUsage, "has no NatsConnector"},
		{append([]string{"recv", "--config", two}, edge...), exitUsage, "has connectors a, b: choose one with --connector"},
		{append([]string{"recv", "--config", two, "--connector", "c"}, edge...), exitUsage, `--connector "c"`},
		{append([]string{"recv", "--transport", "shm", "--config", two, "--connector", "a"}, edge...), exitUsage, "is a NatsConnector, not a SharedMemoryConnector"},
		{append([]string{"send", "--config", filepath.Join(dir, "none.yaml")}, edge...), exitFail, "none.yaml"},
		{[]string{"bench", "--transports", "ring", "--url", "nats://127.0.0.1:1"}, exitUsage, "nats is not among the transports"},
		{[]string{"bench", "--mode", "fanout", "--transports", "nats"}, exitUsage, `cannot time transport "nats"`},
		{[]string{"bench", "--config", shmOnly}, exitUsage, "has no NatsConnector"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			omnishm(t, nil, c.args...).wantFailure(t, c.code, c.msg)
		})
	}
}

// A server that is not there fails send and recv within the configured
// timeout, as an error (exit 1).
func TestNatsUnreachable(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "omnishm.yaml")
	os.WriteFile(cfg, []byte("connectors:\n  remote:\n    name: NatsConnector\n    extra: {url: \"nats://127.0.0.1:1\", timeout: 200ms}\n"), 0o600)
	r := omnishm(t, nil, "recv", "--config", cfg, "--from", "0", "--to", "1", "--key", "k", "--timeout", "10s")
	r.wantFailure(t, exitFail, "unreachable")
	r = omnishm(t, []byte(`{"x": 1}`), "send", "--config", cfg, "--from", "0", "--to", "1", "--key", "k")
	r.wantFailure(t, exitFail, "unreachable")
}
