package proc

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestSelf(t *testing.T) {
	self, err := Self()
	if err != nil || self.PID != os.Getpid() || self.Start == 0 {
		t.Fatalf("Self() = %v, %v", self, err)
	}
	if got := Check(self); got != Alive {
		t.Errorf("Check(self) = %s", got)
	}
	if !IsSelf(self) || IsSelf(ID{PID: self.PID, Start: self.Start + 1}) {
		t.Error("IsSelf")
	}
	if got := Check(ID{PID: self.PID, Start: self.Start + 1}); got != Dead {
		t.Errorf("Check(reused pid) = %s, want dead", got)
	}
	for _, pid := range []int{0, -1, 1 << 40} {
		if got := Check(ID{PID: pid}); got != Dead {
			t.Errorf("Check(pid %d) = %s, want dead", pid, got)
		}
		if _, err := StartTime(pid); !errors.Is(err, ErrNoProcess) {
			t.Errorf("StartTime(%d): %v", pid, err)
		}
	}
}

// child starts a copy of the test binary that runs no test and waits for
// its stdin to close, so the test decides when it exits.
func child(t *testing.T) (*exec.Cmd, ID, func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperChild$")
	cmd.Env = append(os.Environ(), "PROC_TEST_CHILD=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	start, err := StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	var once bool
	exit := func() {
		if !once {
			once = true
			stdin.Close()
		}
	}
	t.Cleanup(func() { exit(); cmd.Wait() })
	return cmd, ID{PID: cmd.Process.Pid, Start: start}, exit
}

func TestHelperChild(t *testing.T) {
	if os.Getenv("PROC_TEST_CHILD") != "1" {
		t.Skip("a child role")
	}
	var b [1]byte
	os.Stdin.Read(b[:])
}

// Exited is exact, not the watcher's flag: an exit the caller has already
// seen (the child reaped) is reported even if Done's watcher has not run.
func TestHandleExitedIsExact(t *testing.T) {
	for i := 0; i < 5; i++ {
		cmd, id, exit := child(t)
		h, err := Open(id)
		if errors.Is(err, ErrNoPidfd) {
			t.Skip(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		h.Done() // the watcher runs, parked in the poller
		exit()
		cmd.Wait()
		if !h.Exited() {
			t.Fatalf("try %d: Exited false after the child was reaped", i)
		}
		h.Close()
	}
}

func TestHandleSeesExit(t *testing.T) {
	cmd, id, exit := child(t)
	if got := Check(id); got != Alive {
		t.Fatalf("Check(running child) = %s", got)
	}
	h, err := Open(id)
	if errors.Is(err, ErrNoPidfd) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.Exited() {
		t.Fatal("Exited before the child exited")
	}
	// The ring asks before every claim from a peer's ring.
	if a := testing.AllocsPerRun(100, func() { h.Exited() }); a != 0 {
		t.Errorf("Exited allocates %v times", a)
	}
	// A context that ends first ends the wait.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait(cancelled) = %v", err)
	}
	exit()
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.Wait(ctx); err != nil {
		t.Fatalf("Wait = %v", err)
	}
	if !h.Exited() {
		t.Error("Exited false after Wait returned")
	}
	// Exited but not reaped: /proc still has the zombie, yet the pidfd says so.
	cmd.Wait()
	if got := Check(id); got != Dead {
		t.Errorf("Check(reaped child) = %s", got)
	}
	if _, err := Open(id); !errors.Is(err, ErrNoProcess) {
		t.Errorf("Open(reaped child) = %v", err)
	}
	if err := h.Close(); err != nil {
		t.Error(err)
	}
	if err := h.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestOpenRefusesAnotherStartTime(t *testing.T) {
	_, id, _ := child(t)
	id.Start++
	if h, err := Open(id); !errors.Is(err, ErrNoProcess) {
		if h != nil {
			h.Close()
		}
		t.Fatalf("Open(pid with another start time) = %v", err)
	}
}

// OpenAnywhere and MappedBy find this process's open and mapped file, and
// lose it once it is closed and unmapped. (complete holds where every
// process's /proc entries are readable, as for root in a container; as
// another user only this test's own verdicts are checked.)
func TestOpenAndMappedFiles(t *testing.T) {
	path := t.TempDir() + "/held"
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	file := File{st.Dev, st.Ino}
	mem, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	if open, _ := OpenAnywhere([]File{file}); !open[file] {
		t.Error("an open file not found open")
	}
	if pid, complete := MappedBy(os.Getuid(), path, st.Ino); pid != os.Getpid() || !complete {
		t.Errorf("MappedBy = %d, %v; want this process %d", pid, complete, os.Getpid())
	}
	if err := unix.Munmap(mem); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if open, _ := OpenAnywhere([]File{file}); open[file] {
		t.Error("a closed file found open")
	}
	if pid, _ := MappedBy(os.Getuid(), path, st.Ino); pid != 0 {
		t.Errorf("MappedBy after munmap = %d", pid)
	}
}

// BenchmarkExited is the check a ring claim makes of a live producer: one
// poll of its pidfd.
func BenchmarkExited(b *testing.B) {
	self, err := Self()
	if err != nil {
		b.Fatal(err)
	}
	h, err := Open(self)
	if err != nil {
		b.Skip(err)
	}
	defer h.Close()
	b.ReportAllocs()
	for b.Loop() {
		if h.Exited() {
			b.Fatal("this process exited")
		}
	}
}
