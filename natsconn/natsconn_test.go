//go:build linux

package natsconn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"omnishm/config"
	"omnishm/connector"
	"omnishm/descriptor"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/tensor"
	"omnishm/wire"
)

func TestPutGet(t *testing.T) {
	sender, receiver := edge(t, startServer(t))
	size, d, err := sender.Put("0", "1", "req-1_0_0", codes(56, 100))
	if err != nil {
		t.Fatal(err)
	}
	if d.Nats == nil || d.Size != size || d.Nats.Size != size || d.Nats.Revision == 0 || d.Nats.Key != "0.1.req-1_0_0" || d.Nats.Object != "" {
		t.Fatalf("descriptor %v, size %d", d, size)
	}
	if got := conntest.CodesOf(t, conntest.MustGet(t, receiver, "0", "1", "req-1_0_0", &d)); len(got) != 56 || got[0] != 100 || got[55] != 155 {
		t.Fatalf("got %v", got)
	}
	conntest.Missing(t, receiver, "0", "1", "req-1_0_0", nil)
	if h := receiver.Health(); h.Gets != 1 || h.RemoteClaimsLost != 0 {
		t.Fatalf("receiver health %+v", h)
	}
	if h := sender.Health(); h.Puts != 1 || h.BytesTransferred != uint64(size) || h.HostRingPuts != 0 {
		t.Fatalf("sender health %+v", h)
	}
}

// The bytes of a publication are the ring's: a tensor frame for a payload
// with tensors, the msgpack form (wire.Marshal's bytes) for one without.
func TestPayloadBytesAreTheRings(t *testing.T) {
	ts := startServer(t)
	sender, receiver := edge(t, ts)
	nc, js := client(t, ts.url())
	defer nc.Close()
	kv, err := js.KeyValue(context.Background(), sender.opts.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	plain := map[string]any{"text": "hello", "ids": []any{int64(1), int64(2)}, "blob": []byte{0, 1, 2}}
	framed := codes(4, 1)
	for _, c := range []struct {
		name    string
		payload any
		kind    string
	}{{"plain", plain, kindBytes}, {"tensors", framed, kindTensors}} {
		d := conntest.MustPut(t, sender, "0", "1", c.name, c.payload)
		e, err := kv.Get(context.Background(), d.Nats.Key)
		if err != nil {
			t.Fatal(err)
		}
		want, kind, err := encode(c.payload)
		if err != nil || kind != c.kind {
			t.Fatalf("%s: kind %q %v", c.name, kind, err)
		}
		// A tensor frame's nonce is random per message: compare the sizes
		// and decode it instead.
		if len(e.Value()) != len(want) || c.kind == kindBytes && !bytes.Equal(e.Value(), want) {
			t.Fatalf("%s: entry holds %d bytes, want %d", c.name, len(e.Value()), len(want))
		}
		if c.kind == kindBytes {
			if b, _ := wire.Marshal(plain); !bytes.Equal(e.Value(), b) {
				t.Fatal("plain payload is not wire.Marshal's bytes")
			}
		}
		got := conntest.MustGet(t, receiver, "0", "1", c.name, &d)
		if c.kind == kindTensors {
			if v := conntest.CodesOf(t, got); !slices.Equal(v, []int64{1, 2, 3, 4}) {
				t.Fatalf("codes %v", v)
			}
		} else if m := got.(map[string]any); m["text"] != "hello" || !bytes.Equal(m["blob"].([]byte), []byte{0, 1, 2}) {
			t.Fatalf("plain payload came back as %#v", m)
		}
	}
}

func TestSourceCanBeReusedAsSoonAsPutReturns(t *testing.T) {
	sender, receiver := edge(t, startServer(t))
	src, _ := tensor.FromSlice([]int64{1, 2, 3})
	conntest.MustPut(t, sender, "0", "1", "reuse", map[string]any{"codes": src})
	clear(src.Data)
	if got := conntest.CodesOf(t, conntest.MustGet(t, receiver, "0", "1", "reuse", nil)); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("got %v", got)
	}
}

func TestReplaceUnclaimed(t *testing.T) {
	ts := startServer(t)
	sender, receiver := edge(t, ts)
	conntest.MustPut(t, sender, "0", "1", "again", codes(3, 1))
	conntest.MustPut(t, sender, "0", "1", "again", codes(3, 2))
	if got := first(t, receiver, "0", "1", "again", nil); got != 2 {
		t.Fatalf("got %v, want the second put", got)
	}
	conntest.Missing(t, receiver, "0", "1", "again", nil)
	// Another producer's put replaces too: one bucket, one entry per key.
	other := openConn(t, ts.url(), sender.opts.Bucket, "0")
	conntest.MustPut(t, sender, "0", "1", "again", codes(3, 3))
	conntest.MustPut(t, other, "0", "1", "again", codes(3, 4))
	if got := first(t, receiver, "0", "1", "again", nil); got != 4 {
		t.Fatalf("got %v, want the other producer's put", got)
	}
	// Edges are apart: the same key on another edge is another entry.
	conntest.MustPut(t, sender, "0", "2", "again", codes(3, 5))
	conntest.Missing(t, receiver, "0", "1", "again", nil)
	if got := first(t, receiver, "0", "2", "again", nil); got != 5 {
		t.Fatalf("edge 0->2 got %v", got)
	}
}

func TestStaleDescriptorNeverReadsANewerPublication(t *testing.T) {
	sender, receiver := edge(t, startServer(t))
	old := conntest.MustPut(t, sender, "0", "1", "stale", codes(3, 1))
	fresh := conntest.MustPut(t, sender, "0", "1", "stale", codes(3, 2))
	if fresh.Nats.Revision <= old.Nats.Revision {
		t.Fatalf("revisions %d then %d", old.Nats.Revision, fresh.Nats.Revision)
	}
	conntest.Missing(t, receiver, "0", "1", "stale", &old)
	if got := first(t, receiver, "0", "1", "stale", &fresh); got != 2 {
		t.Fatalf("got %v", got)
	}
	// Claimed, then put again: the claimed one's descriptor still misses,
	// and leaves the new publication alone.
	newest := conntest.MustPut(t, sender, "0", "1", "stale", codes(3, 3))
	conntest.Missing(t, receiver, "0", "1", "stale", &fresh)
	conntest.Missing(t, receiver, "0", "1", "stale", &old)
	if got := first(t, receiver, "0", "1", "stale", &newest); got != 3 {
		t.Fatalf("got %v", got)
	}
	// Through JSON, as descriptors travel between stages.
	d := conntest.MustPut(t, sender, "0", "1", "stale", codes(3, 4))
	parsed, err := descriptor.Parse([]byte(`{"stale": `+d.String()+`}`), "stale")
	if err != nil {
		t.Fatal(err)
	}
	if got := first(t, receiver, "0", "1", "stale", parsed); got != 4 {
		t.Fatalf("got %v", got)
	}
}

func TestDescriptorsOfOtherPublications(t *testing.T) {
	sender, receiver := edge(t, startServer(t))
	d := conntest.MustPut(t, sender, "0", "1", "mine", codes(3, 1))
	otherBucket := d
	otherBucket.Nats = &descriptor.NatsHandle{Bucket: "elsewhere", Key: d.Nats.Key, Revision: d.Nats.Revision, Size: d.Size}
	conntest.Missing(t, receiver, "0", "1", "mine", &otherBucket)
	conntest.Missing(t, receiver, "0", "1", "yours", &d) // names "mine"
	shm := Descriptor{Shm: &connector.ShmHandle{Name: "mine", Size: 3}, Size: 3}
	if _, _, _, err := receiver.Get("0", "1", "mine", &shm); !errors.Is(err, descriptor.ErrBad) {
		t.Fatalf("shm descriptor: %v", err)
	}
	if got := first(t, receiver, "0", "1", "mine", &d); got != 1 {
		t.Fatalf("got %v", got)
	}
}

func TestCleanupAndCleanupPrefixExactness(t *testing.T) {
	ts := startServer(t)
	sender, receiver := edge(t, ts)
	for i, k := range []string{"req_0_1", "req_0_12", "req_0_1x", "request_0_1", "req_0_", "req_0_7", "req_1_3"} {
		conntest.MustPut(t, sender, "0", "1", k, codes(1, int64(i)))
	}
	conntest.MustPut(t, sender, "0", "2", "req_0_5", codes(1, 50)) // another edge: retired too
	conntest.MustGet(t, receiver, "0", "1", "req_0_7", nil)        // claimed: not the producer's to retire
	if n := sender.CleanupPrefix("req_0_"); n != 3 {
		t.Fatalf("cleanup_prefix retired %d, want 3 (req_0_1, req_0_12, req_0_5 on 0->2)", n)
	}
	for _, k := range []string{"req_0_1", "req_0_12", "req_0_7"} {
		conntest.Missing(t, receiver, "0", "1", k, nil)
	}
	conntest.Missing(t, receiver, "0", "2", "req_0_5", nil)
	for _, k := range []string{"req_0_1x", "request_0_1", "req_0_"} {
		conntest.MustGet(t, receiver, "0", "1", k, nil)
	}
	if n := sender.CleanupPrefix("req_0_"); n != 0 {
		t.Fatalf("second cleanup_prefix retired %d", n)
	}
	// Cleanup retires one exact key and says whether it did.
	if !sender.Cleanup("req_1_3") {
		t.Fatal("cleanup of an unclaimed key reported nothing")
	}
	if sender.Cleanup("req_1_3") {
		t.Fatal("a second cleanup reported a retirement")
	}
	conntest.Missing(t, receiver, "0", "1", "req_1_3", nil)
	// Another producer's publication is not this one's to retire.
	other := openConn(t, ts.url(), sender.opts.Bucket, "0")
	conntest.MustPut(t, other, "0", "1", "theirs", codes(1, 9))
	if sender.Cleanup("theirs") || sender.CleanupPrefix("the") != 0 {
		t.Fatal("retired another producer's publication")
	}
	conntest.MustGet(t, receiver, "0", "1", "theirs", nil)
	// An empty prefix selects the all-digit keys, as the ring's does.
	conntest.MustPut(t, sender, "0", "1", "42", codes(1, 0))
	conntest.MustPut(t, sender, "0", "1", "x42", codes(1, 0))
	if n := sender.CleanupPrefix(""); n != 1 {
		t.Fatalf("cleanup_prefix(\"\") retired %d", n)
	}
	conntest.MustGet(t, receiver, "0", "1", "x42", nil)
}

// A replace after a claim is a put like any other; a replace before it
// retires the replaced put's object at once.
func TestCleanupAfterReplaceRetiresTheNewest(t *testing.T) {
	sender, receiver := edge(t, startServer(t))
	conntest.MustPut(t, sender, "0", "1", "r", codes(1, 1))
	conntest.MustGet(t, receiver, "0", "1", "r", nil)
	conntest.MustPut(t, sender, "0", "1", "r", codes(1, 2))
	if !sender.Cleanup("r") {
		t.Fatal("the put after the claim was not retired")
	}
	conntest.Missing(t, receiver, "0", "1", "r", nil)
}

func TestKeysNATSCannotHold(t *testing.T) {
	sender, receiver := edge(t, startServer(t))
	long := strings.Repeat("é", 118) // 236 bytes: the longest key segments allow
	keys := []string{"a.b", "a*b", ">", "a b", "k=v", "ünï", "tab\tkey", "$KV.x", "...", long}
	edges := [][2]string{{"0", "1"}, {"encoder", "decoder.v2"}, {"", "1"}}
	for i, k := range keys {
		for j, e := range edges {
			conntest.MustPut(t, sender, e[0], e[1], k, codes(1, int64(10*i+j)))
		}
	}
	for i, k := range keys {
		for j, e := range edges {
			if got := first(t, receiver, e[0], e[1], k, nil); got != int64(10*i+j) {
				t.Fatalf("key %q on %v: got %v", k, e, got)
			}
		}
	}
	for _, k := range []string{"", "a/b", "nul\x00", ".", strings.Repeat("k", 238), "\xff"} {
		if _, _, err := sender.Put("0", "1", k, codes(1, 0)); !errors.Is(err, connector.ErrBadKey) {
			t.Errorf("put %q: %v", k, err)
		}
		if _, _, _, err := receiver.Get("0", "1", k, nil); !errors.Is(err, connector.ErrBadKey) {
			t.Errorf("get %q: %v", k, err)
		}
	}
}

// smallMessages makes the server's maximum message size 64 KiB, so that a
// payload of 100 KB goes through the object store.
func smallMessages(o *server.Options) { o.MaxPayload = 64 << 10 }

func big(n int, seed float32) *tensor.Tensor {
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = seed + float32(i)*0.5
	}
	t, _ := tensor.FromSlice(vals)
	return t
}

func TestLargePayloadGoesThroughTheObjectStore(t *testing.T) {
	ts := startServer(t, smallMessages)
	sender, receiver := edge(t, ts)
	hidden := big(100_000, 3) // 400 KB: several chunks of the 64 KiB limit
	small := codes(4, 7)["codes"]
	plainBins := map[string]any{"audio": bytes.Repeat([]byte{0xab}, 200_000)} // no tensors: the msgpack form
	for _, c := range []struct {
		name    string
		payload any
	}{{"frame", map[string]any{"hidden": hidden, "codes": small}}, {"plain", plainBins}} {
		size, d, err := sender.Put("0", "1", c.name, c.payload)
		if err != nil {
			t.Fatal(err)
		}
		if d.Nats.Object == "" || size < 200_000 {
			t.Fatalf("%s: %d bytes, descriptor %v: not in the object store", c.name, size, d)
		}
		v, n, ok, err := receiver.Get("0", "1", c.name, &d)
		if err != nil || !ok || n != size {
			t.Fatalf("%s: ok=%v n=%d/%d err=%v", c.name, ok, n, size, err)
		}
		m := v.(map[string]any)
		if c.name == "plain" {
			if !bytes.Equal(m["audio"].([]byte), plainBins["audio"].([]byte)) {
				t.Fatal("plain bins differ")
			}
		} else if !m["hidden"].(*tensor.Tensor).Equal(hidden) || !m["codes"].(*tensor.Tensor).Equal(small.(*tensor.Tensor)) {
			t.Fatal("tensors differ")
		}
		conntest.Missing(t, receiver, "0", "1", c.name, nil)
		// The claimer deletes the object.
		shmtest.Eventually(t, wait, "the claimed object to be deleted", func() bool {
			_, err := sender.objects.GetInfo(context.Background(), d.Nats.Object)
			return errors.Is(err, jetstream.ErrObjectNotFound)
		})
	}
	if h := sender.Health(); h.RemoteObjectPuts != 2 || h.Puts != 2 {
		t.Fatalf("sender health %+v", h)
	}
	if h := receiver.Health(); h.RemoteObjectGets != 2 || h.Gets != 2 {
		t.Fatalf("receiver health %+v", h)
	}
}

func TestObjectStorePayloadIsChecked(t *testing.T) {
	ts := startServer(t, smallMessages)
	sender, receiver := edge(t, ts)
	d := conntest.MustPut(t, sender, "0", "1", "tampered", map[string]any{"hidden": big(50_000, 1)})
	// Someone rewrites the object behind the entry's back.
	meta := jetstream.ObjectMeta{Name: d.Nats.Object, Opts: &jetstream.ObjectMetaOptions{ChunkSize: 32 << 10}}
	if _, err := sender.objects.Put(context.Background(), meta, bytes.NewReader(make([]byte, 200_016))); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := receiver.Get("0", "1", "tampered", &d); ok || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("tampered object: ok=%v err=%v", ok, err)
	}
}

func TestReplacingAnObjectPayloadDeletesTheReplacedObject(t *testing.T) {
	ts := startServer(t, smallMessages)
	sender, receiver := edge(t, ts)
	first := conntest.MustPut(t, sender, "0", "1", "big", map[string]any{"hidden": big(30_000, 1)})
	second := conntest.MustPut(t, sender, "0", "1", "big", map[string]any{"hidden": big(30_000, 2)})
	shmtest.Eventually(t, wait, "the replaced object to be deleted", func() bool {
		_, err := sender.objects.GetInfo(context.Background(), first.Nats.Object)
		return errors.Is(err, jetstream.ErrObjectNotFound)
	})
	got := conntest.MustGet(t, receiver, "0", "1", "big", nil).(map[string]any)["hidden"].(*tensor.Tensor)
	if !got.Equal(big(30_000, 2)) {
		t.Fatal("got the replaced payload")
	}
	// A claim before the replace: the claimer's object stays its own.
	third := conntest.MustPut(t, sender, "0", "1", "big", map[string]any{"hidden": big(30_000, 3)})
	if _, _, ok, err := receiver.Get("0", "1", "big", &second); ok || err != nil {
		t.Fatalf("the claimed descriptor: ok=%v err=%v", ok, err)
	}
	conntest.MustGet(t, receiver, "0", "1", "big", &third)
}

func TestRecvIsWokenByTheWatch(t *testing.T) {
	sender, receiver := edge(t, startServer(t))
	type result struct {
		v   any
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, _, err := receiver.Recv(context.Background(), "0", "woken")
		done <- result{v, err}
	}()
	// Asleep on the watch: only a publication it delivers can wake it (Recv
	// has no timer, and the connection stays up).
	shmtest.Eventually(t, wait, "Recv to sleep on the watch", func() bool { return receiver.asleep.Load() == 1 })
	gets := receiver.Health().Gets
	conntest.MustPut(t, sender, "0", "1", "woken", codes(2, 42))
	select {
	case r := <-done:
		if r.err != nil || conntest.CodesOf(t, r.v)[0] != 42 {
			t.Fatalf("recv: %v %v", r.v, r.err)
		}
	case <-time.After(wait):
		t.Fatal("Recv slept through the put")
	}
	if receiver.Health().Gets != gets+1 {
		t.Fatal("recv did not count its claim")
	}
	// A second Recv reuses the watch; one for another key ignores this put.
	go func() {
		v, _, err := receiver.Recv(context.Background(), "0", "woken-2")
		done <- result{v, err}
	}()
	shmtest.Eventually(t, wait, "Recv to sleep again", func() bool { return receiver.asleep.Load() == 1 })
	conntest.MustPut(t, sender, "0", "1", "other", codes(1, 0))
	conntest.MustPut(t, sender, "0", "1", "woken-2", codes(1, 7))
	if r := <-done; r.err != nil || conntest.CodesOf(t, r.v)[0] != 7 {
		t.Fatalf("recv: %v %v", r.v, r.err)
	}
	conntest.MustGet(t, receiver, "0", "1", "other", nil)
}

func TestRecvFindsAnEarlierPutAndEndsWithItsContext(t *testing.T) {
	sender, receiver := edge(t, startServer(t))
	conntest.MustPut(t, sender, "0", "1", "early", codes(1, 5))
	v, _, err := receiver.Recv(context.Background(), "0", "early")
	if err != nil || conntest.CodesOf(t, v)[0] != 5 {
		t.Fatalf("recv: %v %v", v, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		shmtest.Eventually(t, wait, "Recv to sleep", func() bool { return receiver.asleep.Load() == 1 })
		cancel()
	}()
	if _, _, err := receiver.Recv(ctx, "0", "never"); !errors.Is(err, context.Canceled) {
		t.Fatalf("recv after cancel: %v", err)
	}
	// A receive that times out leaves the publication for the next one.
	short, cancel2 := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel2()
	<-short.Done()
	if _, _, ok, err := receiver.GetContext(short, "0", "1", "x", nil); ok || err != nil {
		t.Fatalf("done ctx: ok=%v err=%v", ok, err)
	}
	if _, _, ok, err := receiver.GetWithDeadline("0", "1", "x", nil, time.Now().Add(-time.Second)); ok || err != nil {
		t.Fatalf("past deadline: ok=%v err=%v", ok, err)
	}
	conntest.MustPut(t, sender, "0", "1", "late", codes(1, 6))
	if _, _, ok, err := receiver.GetWithDeadline("0", "1", "late", nil, time.Now().Add(wait)); !ok || err != nil {
		t.Fatalf("deadline get: ok=%v err=%v", ok, err)
	}
}

// A Recv whose deadline passes says where it looked (bucket, stream,
// subject) and what the server holds there: the key's entry, other keys on
// the edge, the key on another edge, other buckets, a deleted stream, an
// unreachable server. It still matches context.DeadlineExceeded.
func TestRecvTimeoutSaysWhatItSaw(t *testing.T) {
	ts := startServer(t)
	sender, receiver := edge(t, ts)
	openConn(t, ts.url(), bucket(t), "5") // another bucket
	recvTimeout := func(key string) *connector.RecvTimeoutError {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		_, _, err := receiver.Recv(ctx, "0", key)
		te, ok := errors.AsType[*connector.RecvTimeoutError](err)
		if !ok || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("recv %q: %v, want a RecvTimeoutError", key, err)
		}
		return te
	}
	contains := func(te *connector.RecvTimeoutError, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(te.Error(), w) {
				t.Errorf("%s\nwant %q in it", te, w)
			}
		}
	}
	conntest.MustPut(t, sender, "0", "1", "other", codes(1, 1))
	conntest.MustPut(t, sender, "0", "2", "k", codes(1, 2))
	b := receiver.opts.Bucket
	te := recvTimeout("k")
	if te.From != "0" || te.To != "1" || te.Key != "k" {
		t.Errorf("edge %s->%s key %q", te.From, te.To, te.Key)
	}
	contains(te, fmt.Sprintf("bucket %q, stream KV_%s, subject $KV.%s.0.1.k:", b, b, b),
		"no entry for the key", "1 unclaimed publication of another key on the edge (other)",
		"the key unclaimed on edge 0->2", "other buckets on the server (")

	conntest.MustPut(t, sender, "0", "1", "k", codes(1, 3))
	conntest.MustGet(t, openConn(t, ts.url(), b, "1"), "0", "1", "k", nil)
	contains(recvTimeout("k"), "claimed already")

	_, js := client(t, ts.url())
	if err := js.DeleteKeyValue(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	contains(recvTimeout("k"), "no stream KV_"+b)

	ts.stop()
	shmtest.Eventually(t, wait, "the receiver to see the server gone", func() bool { up, _, _, _ := receiver.link.state(); return !up })
	contains(recvTimeout("k"), "the server is unreachable")
}

// Many receivers in this process, each with its own connection, race for
// every publication; each is claimed once, none is lost.
func TestConcurrentReceiversClaimEachPublicationOnce(t *testing.T) {
	ts := startServer(t)
	sender, _ := edge(t, ts)
	conns := make([]*Connector, 4)
	for i := range conns {
		conns[i] = openConn(t, ts.url(), sender.opts.Bucket, "1")
	}
	keys := keyList("race_", 40)
	log := &claimLog{owners: map[string][]int{}}
	done := compete(t, conns, keys, log)
	for i, key := range keys {
		conntest.MustPut(t, sender, "0", "1", key, codes(1, int64(i)))
	}
	done.Wait()
	log.checkOnce(t, keys)
}

func TestUnclaimedPayloadsExpire(t *testing.T) {
	ts := startServer(t, smallMessages)
	sender, receiver := edge(t, ts, func(o *Options) { o.MaxAge = time.Second })
	d := conntest.MustPut(t, sender, "0", "1", "old", codes(1, 1))
	large := conntest.MustPut(t, sender, "0", "1", "old-large", map[string]any{"hidden": big(30_000, 1)})
	nc, js := client(t, ts.url())
	defer nc.Close()
	kv, err := js.KeyValue(context.Background(), sender.opts.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	shmtest.Eventually(t, wait, "the unclaimed entries to expire", func() bool {
		_, err1 := kv.Get(context.Background(), d.Nats.Key)
		_, err2 := kv.Get(context.Background(), large.Nats.Key)
		return errors.Is(err1, jetstream.ErrKeyNotFound) && errors.Is(err2, jetstream.ErrKeyNotFound)
	})
	shmtest.Eventually(t, wait, "the unclaimed object to expire", func() bool {
		_, err := sender.objects.GetInfo(context.Background(), large.Nats.Object)
		return errors.Is(err, jetstream.ErrObjectNotFound)
	})
	conntest.Missing(t, receiver, "0", "1", "old", nil)
	conntest.Missing(t, receiver, "0", "1", "old-large", nil)
}

func TestCloseRetiresUnclaimedPublications(t *testing.T) {
	sender, receiver := edge(t, startServer(t))
	conntest.MustPut(t, sender, "0", "1", "left", codes(1, 1))
	conntest.MustPut(t, sender, "0", "1", "taken", codes(1, 2))
	conntest.MustGet(t, receiver, "0", "1", "taken", nil)
	if err := sender.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sender.Close(); err != nil {
		t.Fatal("second close:", err)
	}
	conntest.Missing(t, receiver, "0", "1", "left", nil)
	if _, _, err := sender.Put("0", "1", "after", codes(1, 0)); !errors.Is(err, ErrClosed) {
		t.Fatalf("put after close: %v", err)
	}
	if _, _, _, err := sender.Get("0", "1", "after", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("get after close: %v", err)
	}
}

func TestNewFromConfig(t *testing.T) {
	ts := startServer(t)
	b := bucket(t)
	tr, remote := conntest.FromConfig(t, `
connectors:
  remote:
    name: NatsConnector
    extra:
      url: `+ts.url()+`
      bucket: `+b+`
      max_age: 90s
      timeout: 3s
      storage: memory
      stage_id: 1
`, "remote")
	c := tr.(*Connector)
	want := Options{Nats: config.Nats{URL: ts.url(), Bucket: b, ObjectStore: b + "_large", MaxAge: 90 * time.Second, Timeout: 3 * time.Second, Replicas: 1, Storage: "memory"}, StageID: "1"}
	if c.Options() != want {
		t.Fatalf("options %+v\nwant    %+v", c.Options(), want)
	}
	sender := openConn(t, ts.url(), b, "0", func(o *Options) { o.Storage = "memory" })
	conntest.MustPut(t, sender, "0", "1", "configured", codes(1, 3))
	v, _, err := tr.Recv(context.Background(), "0", "configured")
	if err != nil || conntest.CodesOf(t, v)[0] != 3 {
		t.Fatalf("recv: %v %v", v, err)
	}
	bad := remote
	bad.Extra.Nats.Replicas = 9
	if _, err := connector.New(bad); !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("invalid configuration: %v", err)
	}
	// Options set in code meet the same checks, before any server is asked.
	for _, n := range []config.Nats{{Storage: "disk"}, {Replicas: -1}, {Bucket: "a.b"}, {Timeout: time.Microsecond}} {
		n.URL = ts.url()
		if _, err := Open(Options{Nats: n}); !errors.Is(err, config.ErrInvalid) || !strings.HasPrefix(err.Error(), "natsconn: open: config: extra.") {
			t.Errorf("Open(%+v): %v", n, err)
		}
	}
}

// What the watch delivered before anyone asked for it is claimed without
// reading it again; what another receiver took meanwhile is a miss.
func TestDeliveredPublicationsAreClaimedFromTheWatch(t *testing.T) {
	ts := startServer(t)
	sender, receiver := edge(t, ts)
	other := openConn(t, ts.url(), sender.opts.Bucket, "1")
	w, err := receiver.watch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	remembered := func(key string) bool { _, ok := w.remembered(receiver.subject("0", "1", key)); return ok }
	conntest.MustPut(t, sender, "0", "1", "early", codes(1, 1))
	shmtest.Eventually(t, wait, "the watch to deliver the put", func() bool { return remembered("early") })
	v, _, err := receiver.Recv(context.Background(), "0", "early")
	if err != nil || conntest.CodesOf(t, v)[0] != 1 {
		t.Fatalf("recv: %v %v", v, err)
	}
	if remembered("early") {
		t.Fatal("a claimed publication is still remembered")
	}
	conntest.MustPut(t, sender, "0", "1", "taken", codes(1, 2))
	shmtest.Eventually(t, wait, "the watch to deliver the put", func() bool { return remembered("taken") })
	conntest.MustGet(t, other, "0", "1", "taken", nil)
	conntest.Missing(t, receiver, "0", "1", "taken", nil)
	shmtest.Eventually(t, wait, "the watch to see the claim", func() bool { return !remembered("taken") })
	// A replace is remembered in place of what it replaced.
	conntest.MustPut(t, sender, "0", "1", "twice", codes(1, 3))
	d := conntest.MustPut(t, sender, "0", "1", "twice", codes(1, 4))
	shmtest.Eventually(t, wait, "the watch to deliver the replace", func() bool {
		e, ok := w.remembered(receiver.subject("0", "1", "twice"))
		return ok && e.seq == d.Nats.Revision
	})
	if got := first(t, receiver, "0", "1", "twice", nil); got != 4 {
		t.Fatalf("got %v", got)
	}
}
