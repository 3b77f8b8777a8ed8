//go:build linux

package connector_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/scope"
	"omnishm/shmstate"
)

var soakFor = flag.Duration("soak", 0, "run TestSoak, a crash soak, for this long (0: skip it)")

// The soak: producers and receivers of one edge as processes, payloads on
// the ring and the per-key path, a random SIGKILL every 0.5-2 s.
const (
	soakRingBytes = 64 << 10 // a quarter is 16 KiB: every fifth payload is larger
	soakProducers = 3
	soakReceivers = 2
	soakRate      = 2000 // puts per second, all producers together
	soakDrain     = 10 * time.Second
)

// soakSize is the size of a producer's seq-th payload.
func soakSize(seq int) int {
	if seq%5 == 0 {
		return 20000 + seq%4000 // per-key
	}
	return 64 + seq%400 // the ring, or per-key while the ring is full
}

// soakSeed makes a payload's bytes from its key (shmtest.Payload).
func soakSeed(key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return h.Sum64()
}

// roleSoakProducer: scope key-prefix. Puts soakRate/soakProducers payloads
// a second under key-prefix_1, _2, ... on edge 0->1, saying "put KEY SIZE
// PATH" for each, until told "stop"; says "stopped" and stays, its
// publications claimable, until killed or the parent is gone.
func roleSoakProducer(args []string) int {
	c, err := connector.Open(connector.Options{WakeupScope: args[0], StageID: "0", HostRingBytes: soakRingBytes})
	if err != nil {
		return shmtest.ChildFailed(err)
	}
	stop := make(chan struct{})
	go func() {
		shmtest.Hear()
		close(stop)
	}()
	tick := time.NewTicker(time.Second / (soakRate / soakProducers))
	for seq := 1; ; seq++ {
		select {
		case <-stop:
			shmtest.Say("stopped")
			shmtest.Hear()
			return 0
		case <-tick.C:
		}
		key := args[1] + "_" + strconv.Itoa(seq)
		size := soakSize(seq)
		_, d, err := c.Put("0", "1", key, shmtest.Payload(size, soakSeed(key)))
		if err != nil {
			return shmtest.ChildFailed(err)
		}
		path := "ring"
		if d.Shm != nil {
			path = "per-key"
		}
		shmtest.Say("put %s %d %s", key, size, path)
	}
}

// roleSoakReceiver: scope. Claims, on edge 0->1, the keys the parent names
// ("want KEY"; "drop KEY" when another receiver took it or its producer
// died), saying "got KEY DIGEST" for each, or "error KEY ERR".
func roleSoakReceiver(args []string) int {
	c, err := connector.Open(connector.Options{WakeupScope: args[0], StageID: "1", HostRingBytes: soakRingBytes})
	if err != nil {
		return shmtest.ChildFailed(err)
	}
	var mu sync.Mutex
	want := map[string]bool{}
	go func() {
		for {
			line := shmtest.Hear()
			op, key, _ := strings.Cut(line, " ")
			mu.Lock()
			switch op {
			case "want":
				want[key] = true
			case "drop":
				delete(want, key)
			default: // the parent is gone
				os.Exit(0)
			}
			mu.Unlock()
		}
	}()
	for {
		mu.Lock()
		keys := slices.Collect(maps.Keys(want))
		mu.Unlock()
		got := 0
		for _, key := range keys {
			v, _, ok, err := c.Get("0", "1", key, nil)
			switch {
			case err != nil:
				shmtest.Say("error %s %v", key, err)
			case ok:
				mu.Lock()
				delete(want, key)
				mu.Unlock()
				b, _ := v.([]byte)
				shmtest.Say("got %s %s", key, shmtest.Digest(b))
				got++
			}
		}
		if got == 0 {
			time.Sleep(200 * time.Microsecond) // the poll's pace
		}
	}
}

// soakProc is one child of the soak.
type soakProc struct {
	p        *shmtest.Proc
	producer bool
	prefix   string // a producer's keys: prefix_seq
	killed   bool
	stopped  bool
}

type soakEvent struct {
	from *soakProc
	line string // "" at the child's end
}

// soakKey is what the soak knows of one published key.
type soakKey struct {
	from      *soakProc
	digest    string // of what was put
	got       []string
	producerD bool // its producer was killed
}

// TestSoak is a crash soak in the suite's own terms (skipped unless -soak
// is set): soakProducers producers and soakReceivers receivers of one edge
// run as processes, puts go to the ring and the per-key path, and a random
// one of them is killed with SIGKILL every 0.5-2 s and restarted. It
// asserts that no payload is delivered twice or corrupt, that every
// payload of a live producer is delivered (but the one a receiver may have
// claimed when it was killed), and that once every process is gone and
// one prune ran, nothing of the scope is left in /dev/shm.
func TestSoak(t *testing.T) {
	if *soakFor <= 0 {
		t.Skip("a crash soak: go test ./connector -run Soak -soak 60s")
	}
	s := shmtest.Scope(t)
	names := scope.New(s)
	base := shmtest.Key("soak")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan soakEvent, 4096)
	generation := 0
	start := func(producer bool) *soakProc {
		sp := &soakProc{producer: producer}
		if producer {
			generation++
			sp.prefix = fmt.Sprintf("%s_%d", base, generation)
			sp.p = shmtest.Start(t, "soakproducer", s, sp.prefix)
		} else {
			sp.p = shmtest.Start(t, "soakreceiver", s)
		}
		go func() {
			for {
				line, err := sp.p.ReadLine(ctx)
				if err != nil {
					line = ""
				}
				select {
				case events <- soakEvent{sp, line}:
				case <-ctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
		return sp
	}
	var procs []*soakProc
	for i := range soakProducers + soakReceivers {
		procs = append(procs, start(i < soakProducers))
	}
	keys := map[string]*soakKey{}
	outstanding := map[string]bool{} // put, not delivered, producer alive
	inDoubt := map[string]bool{}     // outstanding when a receiver was killed
	var counts struct {
		puts, ring, perKey, delivered, duplicates, corrupt, errors int
		producerKills, receiverKills                               int
	}
	lookup := func(key string) *soakKey {
		k := keys[key]
		if k == nil {
			k = &soakKey{}
			keys[key] = k
		}
		return k
	}
	receivers := func(except *soakProc) []*soakProc {
		var rs []*soakProc
		for _, sp := range procs {
			if !sp.producer && !sp.killed && sp != except {
				rs = append(rs, sp)
			}
		}
		return rs
	}
	tell := func(rs []*soakProc, line string) {
		for _, r := range rs {
			r.p.TrySend(line) // a receiver killed meanwhile needs no more
		}
	}
	checkDigest := func(key string, k *soakKey) {
		for _, d := range k.got {
			if k.digest != "" && d != k.digest {
				counts.corrupt++
				t.Errorf("%s: got digest %s, put %s", key, d, k.digest)
			}
		}
	}
	handle := func(ev soakEvent) bool {
		op, rest, _ := strings.Cut(ev.line, " ")
		switch op {
		case "":
			if !ev.from.killed {
				t.Errorf("child %d ended by itself", ev.from.p.Pid())
			}
		case "put":
			f := strings.Fields(rest)
			size, _ := strconv.Atoi(f[1])
			counts.puts++
			if f[2] == "ring" {
				counts.ring++
			} else {
				counts.perKey++
			}
			k := lookup(f[0])
			k.from, k.digest = ev.from, shmtest.Digest(shmtest.Payload(size, soakSeed(f[0])))
			checkDigest(f[0], k)
			switch {
			case ev.from.killed: // its last words, read after the kill
				k.producerD = true
			case len(k.got) == 0:
				outstanding[f[0]] = true
				tell(receivers(nil), "want "+f[0])
			}
		case "got":
			key, digest, _ := strings.Cut(rest, " ")
			k := lookup(key)
			k.got = append(k.got, digest)
			counts.delivered++
			if len(k.got) > 1 {
				counts.duplicates++
				t.Errorf("%s delivered %d times", key, len(k.got))
			}
			checkDigest(key, k)
			delete(outstanding, key)
			tell(receivers(ev.from), "drop "+key)
			return true
		case "error":
			counts.errors++
			t.Errorf("receiver: %s", rest)
		case "stopped":
			ev.from.stopped = true
		default:
			t.Errorf("child said %q", ev.line)
		}
		return false
	}
	kill := func() {
		var alive []int
		for i, sp := range procs {
			if !sp.killed {
				alive = append(alive, i)
			}
		}
		i := alive[rand.IntN(len(alive))]
		victim := procs[i]
		victim.killed = true
		victim.p.Kill()
		if victim.producer {
			counts.producerKills++
			for key := range outstanding {
				if k := keys[key]; k.from == victim {
					k.producerD = true
					delete(outstanding, key)
					tell(receivers(nil), "drop "+key)
				}
			}
		} else {
			counts.receiverKills++
			for key := range outstanding {
				inDoubt[key] = true
			}
		}
		procs[i] = start(victim.producer)
		if !victim.producer {
			for key := range outstanding {
				procs[i].p.TrySend("want " + key)
			}
		}
	}

	// The soak, then the drain: producers stop putting and stay, and every
	// payload of theirs must arrive.
	end := time.After(*soakFor)
	nextKill := func() <-chan time.Time { return time.After(500*time.Millisecond + rand.N(1500*time.Millisecond)) }
	killAt := nextKill()
soak:
	for {
		select {
		case ev := <-events:
			handle(ev)
		case <-killAt:
			kill()
			killAt = nextKill()
		case <-end:
			break soak
		}
	}
	for _, sp := range procs {
		if sp.producer {
			sp.p.TrySend("stop")
		}
	}
	quiet := time.NewTimer(soakDrain)
drain:
	for {
		stopped := 0
		for _, sp := range procs {
			if sp.producer && sp.stopped {
				stopped++
			}
		}
		if stopped == soakProducers && len(outstanding) == 0 {
			break
		}
		select {
		case ev := <-events:
			if handle(ev) {
				quiet.Reset(soakDrain)
			}
		case <-quiet.C:
			break drain // what is left was lost
		}
	}
	lost := 0
	for key := range outstanding {
		if !inDoubt[key] {
			t.Errorf("%s of a live producer was never delivered", key)
		}
		lost++
	}
	if lost > counts.receiverKills {
		t.Errorf("%d payloads of live producers lost, more than one per receiver kill (%d)", lost, counts.receiverKills)
	}
	deadUndelivered := 0
	for _, k := range keys {
		if k.producerD && len(k.got) == 0 {
			deadUndelivered++
		}
	}

	// Every process gone: the watchdogs remove what each left; then one
	// prune, and nothing of the scope may be left.
	for _, sp := range procs {
		sp.killed = true
		sp.p.Kill()
	}
	cancel()
	deadline := time.Now().Add(shmtest.Patience)
	for len(conntest.Files(names, base)) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	leftByWatchdogs := conntest.Files(names, base)
	rep, err := shmstate.Prune(shmstate.PruneOptions{Options: shmstate.Options{Scopes: []string{s}, KeyPrefix: base}})
	if err != nil {
		t.Error(err)
	}
	if left := conntest.Files(names, base); len(left) > 0 {
		t.Errorf("left in /dev/shm after the processes and one prune: %v", left)
	}
	t.Logf("soak %v: %d puts (%d ring, %d per-key), %d delivered, %d duplicates, %d corrupt, %d errors",
		*soakFor, counts.puts, counts.ring, counts.perKey, counts.delivered, counts.duplicates, counts.corrupt, counts.errors)
	t.Logf("kills: %d producers, %d receivers; undelivered: %d of killed producers, %d of live ones (in doubt: claimed by a killed receiver)",
		counts.producerKills, counts.receiverKills, deadUndelivered, lost)
	t.Logf("left once the processes were gone: %d files %v; the prune then removed %d", len(leftByWatchdogs), leftByWatchdogs, len(rep.Removed))
}

// Many goroutines put, get, clean up and close one connector while a second
// connector of the scope claims too, on a ring small enough to fill and wrap
// (every fourth payload is too large for it). Every payload whose put
// succeeded is claimed exactly once or retired by Cleanup; once Close has
// run concurrently with puts, nothing more can be claimed and nothing is
// left in /dev/shm.
func TestConcurrentPutGetCleanupClose(t *testing.T) {
	s := shmtest.Scope(t)
	c := conntest.Open(t, s, "0", 4096)     // puts, claims, cleans up, and is closed
	other := conntest.Open(t, s, "1", 4096) // claims
	const producers, phase = 4, 160
	keys := make([]string, 2*phase)
	for i := range keys {
		keys[i] = shmtest.Key("stress")
	}
	type outcome struct {
		put     atomic.Int32 // 1 published, 2 refused by Close
		claims  atomic.Int32
		retired atomic.Bool // Cleanup reported a retirement
	}
	st := make([]outcome, len(keys))
	value := func(i int) any {
		if i%4 == 0 {
			return conntest.Codes(1024, int64(i)) // 8 KiB: beyond a quarter of the ring
		}
		return conntest.Codes(8, int64(i))
	}
	deadline := time.Now().Add(shmtest.Patience)

	// Claimers sweep the published, unresolved keys until stopped (or,
	// for c, closed). A second claim of a key is what this test catches.
	stop := make(chan struct{})
	var claimers sync.WaitGroup
	claim := func(conn *connector.SHM) {
		defer claimers.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if time.Now().After(deadline) {
				t.Error("claimers still running at the deadline")
				return
			}
			for i := range keys {
				if st[i].put.Load() != 1 || st[i].claims.Load() > 0 || st[i].retired.Load() {
					continue
				}
				v, _, ok, err := conn.Get("0", "1", keys[i], nil)
				if errors.Is(err, connector.ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("get %d: %v", i, err)
					return
				}
				if ok {
					st[i].claims.Add(1)
					if got := conntest.CodesOf(t, v); got[0] != int64(i) {
						t.Errorf("key %d carried %d", i, got[0])
					}
				}
			}
			runtime.Gosched()
		}
	}
	for _, conn := range []*connector.SHM{c, c, other, other} {
		claimers.Add(1)
		go claim(conn)
	}

	// Producers put keys[from:to]; every fifth published key is handed to
	// the cleaner. onPut runs after each put.
	produce := func(from, to int, onPut func()) {
		published := make(chan int, to-from)
		var cleaner sync.WaitGroup
		cleaner.Add(1)
		go func() {
			defer cleaner.Done()
			for i := range published {
				if c.Cleanup(keys[i]) {
					st[i].retired.Store(true)
				}
			}
		}()
		var wg sync.WaitGroup
		for g := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := from + g; i < to; i += producers {
					_, _, err := c.Put("0", "1", keys[i], value(i))
					switch {
					case err == nil:
						st[i].put.Store(1)
						if i%5 == 0 {
							published <- i
						}
					case errors.Is(err, connector.ErrClosed):
						st[i].put.Store(2)
					default:
						t.Errorf("put %d: %v", i, err)
					}
					onPut()
				}
			}()
		}
		wg.Wait()
		close(published)
		cleaner.Wait()
	}

	// Phase 1: everything published is claimed or retired, exactly once.
	produce(0, phase, func() {})
	shmtest.Eventually(t, shmtest.Patience, "every payload claimed or retired", func() bool {
		for i := range phase {
			if st[i].claims.Load() == 0 && !st[i].retired.Load() {
				return false
			}
		}
		return true
	})
	for i := range phase {
		retired := 0
		if st[i].retired.Load() {
			retired = 1
		}
		if st[i].put.Load() != 1 || int(st[i].claims.Load())+retired != 1 {
			t.Fatalf("key %d: put %d, %d claims, retired %v", i, st[i].put.Load(), st[i].claims.Load(), retired == 1)
		}
	}

	// Phase 2: Close runs halfway through the puts, in the producer that
	// made the middle one, while the other producers go on.
	var puts atomic.Int32
	closed := make(chan error, 1)
	produce(phase, 2*phase, func() {
		if puts.Add(1) == phase/2 {
			closed <- c.Close()
		}
	})
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	close(stop)
	claimers.Wait()
	refused := 0
	for i := phase; i < 2*phase; i++ {
		if _, _, ok, err := other.Get("0", "1", keys[i], nil); ok || err != nil {
			t.Errorf("key %d claimed after its producer closed (err %v)", i, err)
		}
		put, claims := st[i].put.Load(), st[i].claims.Load()
		if put == 2 {
			refused++
		}
		if put == 0 || claims > 1 || claims == 1 && st[i].retired.Load() {
			t.Errorf("key %d: put %d, %d claims, retired %v", i, put, claims, st[i].retired.Load())
		}
		shmtest.AssertAbsent(t, conntest.KeyFiles(keys[i])...)
	}
	if refused == 0 {
		t.Error("no put was refused: Close did not run during the puts")
	}
	if _, _, err := c.Put("0", "1", shmtest.Key("after-close"), conntest.Codes(1, 0)); !errors.Is(err, connector.ErrClosed) {
		t.Fatalf("put after close: %v", err)
	}
	t.Logf("phase 2: %d of %d puts refused by Close", refused, phase)
}
