//go:build linux

package bench

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/internal/hostclock"
	"omnishm/scope"
)

// The floors a report sets its figures beside, measured in the same run
// and timed the way the figures are, one sample per clock reading: the
// protocol's mandatory locking and the copies no transport can avoid.

// flockFile is the flock floor's file: a file of the run's own in
// /dev/shm, removed again by close.
type flockFile struct {
	f    *os.File
	path string
}

func (r *runner) openFlockFile() (*flockFile, error) {
	path := scope.Path(r.plan.KeyPrefix + "flock_floor")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("flock floor: %w", err)
	}
	return &flockFile{f: f, path: path}, nil
}

// sample times two uncontended flock pairs (LOCK_EX then LOCK_UN, twice),
// what one put and its get must lock at least (SPEC §3).
func (ff *flockFile) sample() (time.Duration, error) {
	fd := int(ff.f.Fd())
	t0 := hostclock.Now()
	for range 2 {
		if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
			return 0, fmt.Errorf("flock floor: %w", err)
		}
		if err := unix.Flock(fd, unix.LOCK_UN); err != nil {
			return 0, fmt.Errorf("flock floor: %w", err)
		}
	}
	return hostclock.Now() - t0, nil
}

func (ff *flockFile) close() {
	ff.f.Close()
	os.Remove(ff.path)
}

// flockFloor times the floor on its own, before the cells, into
// Report.Flock.
func (r *runner) flockFloor(ff *flockFile) (Result, error) {
	count := r.plan.count(0)
	lat := make([]time.Duration, 0, count)
	warmup := r.plan.warmup(count)
	for i := range warmup + count {
		d, err := ff.sample()
		if err != nil {
			return Result{}, err
		}
		if i >= warmup {
			lat = append(lat, d)
		}
	}
	return Summarize(Flock, 0, lat), nil
}

// interleaveFloor makes send time the flock floor after each of a pair
// cell's samples and keep the timed ones in c.floors: on a machine whose
// speed drifts within a run (the project's VM: the floor's p50 went from
// 2.65 to 3.55 µs over four runs of a minute), a floor measured before the
// cells moved the ratios by more than the pairs did, and the connector's
// BenchmarkPairFlockRatio alternates the two for that reason.
func (r *runner) interleaveFloor(c *cell, send func(i int) (time.Duration, error)) func(i int) (time.Duration, error) {
	if c.transport == Nats {
		return send // it locks nothing in /dev/shm: no flock ratio
	}
	c.floors = make([]time.Duration, 0, c.count)
	return func(i int) (time.Duration, error) {
		d, err := send(i)
		if err != nil {
			return d, err
		}
		f, err := r.flock.sample()
		if i >= c.warmup {
			c.floors = append(c.floors, f)
		}
		return d, err
	}
}

// timeMemcpy is a memcpy cell: two plain copies of the payload's msgpack
// form, into memory of its own, as a put copies it in and a get out.
func timeMemcpy(r *runner, c *cell) error {
	in, out := make([]byte, len(c.form)), make([]byte, len(c.form))
	return r.timeEach(c, func(int) (time.Duration, error) {
		t0 := hostclock.Now()
		copy(in, c.form)
		copy(out, in)
		return hostclock.Now() - t0, nil
	})
}

// timeShmFile is a shmfile cell: a fresh /dev/shm file per sample, the
// payload's msgpack form written into it and read back out into memory of
// its own (see ShmFile). The file is the run's own and is gone after each
// sample, also after an error.
func timeShmFile(r *runner, c *cell) error {
	path := scope.Path(r.plan.KeyPrefix + "shmfile_floor")
	out := make([]byte, len(c.form))
	return r.timeEach(c, func(int) (time.Duration, error) {
		t0 := hostclock.Now()
		err := shmFileTrip(path, c.form, out)
		return hostclock.Now() - t0, err
	})
}

// shmFileTrip writes b into a new file at path and reads it back into out
// as a per-key publication and its claim would, then removes the file.
func shmFileTrip(path string, b, out []byte) error {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("shmfile floor: %w", err)
	}
	_, werr := unix.Pwrite(fd, b, 0)
	unix.Close(fd)
	if werr == nil {
		if fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			_, werr = unix.Pread(fd, out, 0)
			unix.Close(fd)
		}
	}
	unix.Unlink(path)
	if err = cmp.Or(werr, err); err != nil {
		return fmt.Errorf("shmfile floor: %w", err)
	}
	return nil
}

// isFloor reports whether a result row is a floor row.
func isFloor(x Result) bool { return x.Transport == Memcpy || x.Transport == ShmFile }

// measured is the report's results without the floor rows, which follow
// them: what the comparisons compare.
func (r *Report) measured() []Result {
	if i := slices.IndexFunc(r.Results, isFloor); i >= 0 {
		return r.Results[:i]
	}
	return r.Results
}

// compareToFloor sets every pair's ratios to the floor: the flock pairs
// (those timed between its samples where there are, Result.FlockUs), and
// the flock pairs plus the memcpy row of its size.
func compareToFloor(r *Report) {
	if r.Flock == nil || r.Flock.P50Us <= 0 {
		return
	}
	copies := map[int]float64{}
	for _, x := range r.Results[len(r.measured()):] {
		if x.Transport == Memcpy {
			copies[x.Size] = x.P50Us
		}
	}
	for i := range r.measured() {
		x := &r.Results[i]
		if x.Transport == Nats {
			continue // locks nothing in /dev/shm: its floor is the server's
		}
		floor := r.Flock.P50Us
		if x.FlockUs > 0 {
			floor = x.FlockUs
		}
		x.FlockRatio = quotient(x.P50Us, floor)
		if c, ok := copies[x.Size]; ok {
			x.FloorRatio = quotient(x.P50Us, floor+c)
		}
	}
}

// compareRates sets VsUDS of every stream result: its rate over the
// rate of transport uds at the same size.
func compareRates(results []Result, uds string) {
	compareTo(results, uds, func(x, base Result) *float64 { return quotient(x.MsgsPerS, base.MsgsPerS) })
}

// fanoutInFlockPairs expresses every fanout's CPU per message in flock
// pairs, half the floor's two, with and without the harness's round trip.
func fanoutInFlockPairs(r *Report) {
	if r.Flock == nil {
		return
	}
	for i := range r.Fanout {
		x := &r.Fanout[i]
		x.FlockPairs = quotient(x.CPUPerMsgUs, r.Flock.P50Us/2)
		x.NetFlockPairs = quotient(x.CPUPerMsgUs-x.HarnessUs, r.Flock.P50Us/2)
		if x.PipedRounds > 0 {
			x.PipedFlockPairs = quotient(x.PipedCPUPerMsgUs, r.Flock.P50Us/2)
		}
	}
}

// quotient is a/b, nil when b is not positive.
func quotient(a, b float64) *float64 {
	if b <= 0 {
		return nil
	}
	q := a / b
	return &q
}
