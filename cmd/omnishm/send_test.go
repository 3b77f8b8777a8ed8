//go:build linux

package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"omnishm/internal/shmtest"
	"omnishm/internal/vectortest"
	"omnishm/scope"
)

// roundTripCases are payloads made by the Python reference (testdata
// vectors): tensors of several dtypes, numpy arrays, images, scalars.
var roundTripCases = []string{"tree_float32", "tree_bfloat16", "tree_int64", "tree_bool", "tree_complex64",
	"mixed_native_float16", "scalar_tensor_root", "typed_payload", "scalars", "none"}

func TestSendRecvRoundTrip(t *testing.T) {
	for _, ring := range []struct {
		name, bytes, kind string
	}{{"ring", "4194304", "host_ring"}, {"perkey", "0", "shm"}} {
		t.Run(ring.name, func(t *testing.T) {
			s := opsScope(t)
			for i, c := range roundTripCases {
				payload := vectortest.Read(t, c+".json")
				key := shmtest.Key(c)
				send := startCLI(t, payload, "send", "--scope", s, "--from", "0", "--to", "1", "--key", key, "--ring-bytes", ring.bytes)
				desc := send.line(t)
				// "scalars" has no tensor but still fits the ring as kind 0.
				if got := descriptorKind(t, desc); got != ring.kind {
					t.Errorf("%s: descriptor %s, want %s", c, desc, ring.kind)
				}
				args := []string{"recv", "--scope", s, "--from", "0", "--to", "1", "--key", key, "--ring-bytes", ring.bytes}
				if i%2 == 1 {
					args = append(args, "--descriptor", desc) // exactly that publication
				}
				r := omnishm(t, nil, args...)
				r.wantSuccess(t)
				if got, want := canonical(t, r.stdout), canonical(t, payload); got != want {
					t.Errorf("%s: received\n%s\nwant\n%s", c, got, want)
				}
				if strings.Count(string(r.stdout), "\n") != 1 {
					t.Errorf("%s: output is not one line", c)
				}
				if code := send.wait(t); code != 0 {
					t.Errorf("%s: send exited %d after the claim; stderr %q", c, code, send.errText())
				}
			}
		})
	}
}

func TestSendWaitExpiryRetires(t *testing.T) {
	for _, ringBytes := range []string{"4194304", "0"} {
		t.Run("ring-bytes="+ringBytes, func(t *testing.T) {
			s := opsScope(t)
			key := shmtest.Key("expire")
			send := startCLI(t, []byte(`{"x": [1, 2.5, "three"]}`), "send", "--scope", s, "--from", "0", "--to", "1",
				"--key", key, "--ring-bytes", ringBytes, "--wait", "300ms")
			send.line(t)
			if code := send.wait(t); code != exitUnclaimed {
				t.Fatalf("send exited %d, want %d", code, exitUnclaimed)
			}
			if !strings.Contains(send.errText(), "publication retired") {
				t.Errorf("stderr %q does not say the publication was retired", send.errText())
			}
			r := omnishm(t, nil, "recv", "--scope", s, "--from", "0", "--to", "1", "--key", key, "--ring-bytes", ringBytes, "--timeout", "200ms")
			r.wantFailure(t, exitFail, "nothing received")
		})
	}
}

func TestSendInterruptRetires(t *testing.T) {
	s := opsScope(t)
	key := shmtest.Key("sigint")
	send := startCLI(t, []byte(`{"$tensor": {"dtype": "int16", "shape": [2], "data": "AQACAA=="}}`),
		"send", "--scope", s, "--from", "0", "--to", "1", "--key", key)
	send.line(t)
	send.signal(syscall.SIGINT)
	if code := send.wait(t); code != exitInterrupted {
		t.Fatalf("send exited %d after SIGINT, want %d", code, exitInterrupted)
	}
	r := omnishm(t, nil, "recv", "--scope", s, "--from", "0", "--to", "1", "--key", key, "--timeout", "200ms")
	r.wantFailure(t, exitFail, "nothing received")
}

// A timeout names the scope and what recv saw on the edge.
func TestRecvTimeout(t *testing.T) {
	s := opsScope(t)
	r := omnishm(t, nil, "recv", "--scope", s, "--from", "0", "--to", "1", "--key", shmtest.Key("never"), "--timeout", "100ms")
	r.wantFailure(t, exitFail, `within 100ms (scope "`+s+`"); saw no producer ring on the edge`)
}

// Without --scope, send and recv take OMNISHM_SCOPE, and say nothing:
// each meets a peer that names the scope with --scope.
func TestScopeFromEnvironment(t *testing.T) {
	s := opsScope(t)
	t.Setenv(scopeEnv, s)
	for i, envOn := range []string{"send", "recv"} {
		key := shmtest.Key("env")
		sendArgs := []string{"send", "--from", "0", "--to", "1", "--key", key}
		recvArgs := []string{"recv", "--from", "0", "--to", "1", "--key", key, "--timeout", "20s"}
		if envOn == "send" {
			recvArgs = append(recvArgs, "--scope", s)
		} else {
			sendArgs = append(sendArgs, "--scope", s)
		}
		send := startCLI(t, []byte(`{"n": `+strconv.Itoa(i)+`}`), sendArgs...)
		send.line(t)
		omnishm(t, nil, recvArgs...).wantSuccess(t)
		if code := send.wait(t); code != 0 || send.errText() != "" {
			t.Errorf("scope from the environment of %s: send exited %d, stderr %q", envOn, code, send.errText())
		}
	}
}

// Without any scope, recv warns that its names are keyed by the parent pid
// and says how to share one; its timeout says the same.
func TestNoScopeWarns(t *testing.T) {
	t.Setenv(scopeEnv, "")
	n := scope.ForUID(os.Getuid(), "", os.Getpid()) // the children's parent is this process
	t.Cleanup(func() {
		os.Remove(n.WakeDir)
		os.Remove(n.RingDir())
	})
	r := omnishm(t, nil, "recv", "--from", "0", "--to", "1", "--key", shmtest.Key("noscope"), "--timeout", "50ms")
	lines := strings.Split(strings.TrimSpace(string(r.stderr)), "\n")
	if r.code != exitFail || len(lines) != 2 {
		t.Fatalf("exit %d, stderr %q: want a warning and the timeout", r.code, r.stderr)
	}
	for _, w := range []string{"no --scope, OMNISHM_SCOPE or wakeup_scope", "parent pid " + strconv.Itoa(os.Getpid()), "--scope NAME", "export OMNISHM_SCOPE=NAME"} {
		if !strings.Contains(lines[0], w) {
			t.Errorf("warning %q lacks %q", lines[0], w)
		}
	}
	if w := "(no scope (names keyed by the parent pid " + strconv.Itoa(os.Getpid()); !strings.Contains(lines[1], w) {
		t.Errorf("timeout %q lacks %q", lines[1], w)
	}
}

func TestOpsUsageErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name  string
		stdin string
		args  []string
		code  int
		msg   string
	}{
		{"send without key", "", []string{"send", "--from", "0", "--to", "1"}, exitUsage, "--key is required"},
		{"send bad json", "{nope", []string{"send", "--from", "0", "--to", "1", "--key", "k"}, exitFail, "payload"},
		{"send bad tensor", `{"$tensor": {"dtype": "float99", "shape": [1], "data": ""}}`, []string{"send", "--from", "0", "--to", "1", "--key", "k"}, exitFail, "payload"},
		{"send two files", "", []string{"send", "--from", "0", "--to", "1", "--key", "k", "a", "b"}, exitUsage, "at most one"},
		{"send bad wait", "", []string{"send", "--from", "0", "--to", "1", "--key", "k", "--wait", "soon"}, exitUsage, "wait"},
		{"send negative ring", "", []string{"send", "--from", "0", "--to", "1", "--key", "k", "--ring-bytes", "-1"}, exitUsage, "ring-bytes"},
		{"send missing file", "", []string{"send", "--from", "0", "--to", "1", "--key", "k", dir + "/none.json"}, exitFail, "none.json"},
		{"recv without from", "", []string{"recv", "--to", "1", "--key", "k"}, exitUsage, "--from is required"},
		{"recv bad descriptor", "", []string{"recv", "--from", "0", "--to", "1", "--key", "k", "--descriptor", "{}"}, exitUsage, "descriptor"},
		{"recv zero timeout", "", []string{"recv", "--from", "0", "--to", "1", "--key", "k", "--timeout", "0s"}, exitUsage, "timeout"},
		{"inspect scope and all", "", []string{"inspect", "--scope", "x", "--all"}, exitUsage, "exclude"},
		{"inspect argument", "", []string{"inspect", "extra"}, exitUsage, "unexpected"},
		{"prune negative age", "", []string{"prune", "--older-than", "-1s"}, exitUsage, "older-than"},
		{"bench bad size", "", []string{"bench", "--sizes", "3x"}, exitUsage, "3x"},
		{"bench odd size", "", []string{"bench", "--sizes", "6"}, exitUsage, "multiple of 4"},
		{"bench bad mode", "", []string{"bench", "--mode", "fast"}, exitUsage, "mode"},
		{"bench bad transport", "", []string{"bench", "--transports", "ring,tcp"}, exitUsage, "tcp"},
		{"bench twice", "", []string{"bench", "--transports", "ring,ring"}, exitUsage, "twice"},
		{"bench plot format", "", []string{"bench", "--plot", "x.pdf"}, exitUsage, ".svg or .png"},
		{"bench payload and sizes", "", []string{"bench", "--payload", "p.json", "--sizes", "512"}, exitUsage, "exclude"},
		{"bench missing payload", "", []string{"bench", "--payload", dir + "/p.json"}, exitFail, "p.json"},
		{"bench zero count", "", []string{"bench", "--count", "0"}, exitUsage, "count"},
		{"bench small ring", "", []string{"bench", "--ring-bytes", "100"}, exitUsage, "ring-bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			omnishm(t, []byte(tc.stdin), tc.args...).wantFailure(t, tc.code, tc.msg)
		})
	}
}
