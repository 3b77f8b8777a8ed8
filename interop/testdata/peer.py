# SPDX-License-Identifier: Apache-2.0
"""Python peer of omnishm's interop tests (stdlib only).

It drives the seed's own host ring (shm_ring_peer.py, a verbatim copy) and a
small per-key reader/writer that follows SPEC section 6, so the Go tests can
exchange payloads with the reference code through the same /dev/shm files.
Payload bytes travel as hex; the Go side encodes and decodes them.

    peer.py put SCOPE FROM TO KEY KIND HEXFILE [KEY KIND HEXFILE ...] [--ring-bytes N] [--wake]
        One HostRingTransport(wake_dir_of(SCOPE), N, default 4 MiB) publishes
        each payload (KIND 0: serialized bytes, 1: a tensor frame given as its
        raw bytes) and prints one connector descriptor per line, as JSON
        ({"host_ring": {...}, "size": n}, or null when the ring refused).
        With --wake it then wakes stage TO as the connector does (SPEC 8).
        Then it prints "ready" and reads lines: "put KEY KIND HEXFILE"
        publishes one more (and prints its descriptor); "cancel KEY" and
        "cancel_prefix PREFIX" retire unclaimed frames (and print how many);
        "crash" leaves with os._exit(0), without close(); anything else (or
        end of input) closes the transport and prints "closed".
    peer.py get SCOPE FROM TO KEY [DESCRIPTOR_JSON] [--timeout S]
        Polls HostRingTransport.get until it finds the key or S seconds (default
        10; 0 means one attempt) have passed; prints {"kind", "size", "data"}
        (data in hex) or null.
    peer.py serve SCOPE FROM TO
        One long-lived HostRingTransport receiver (its attached rings and
        cached discovery stamps persist across gets): prints "ready", then for
        each line "KEY TIMEOUT [DESCRIPTOR_JSON]" prints what get prints; an
        empty line or end of input closes it and prints "closed".
    peer.py sleep SCOPE FROM TO KEY...
        A receiver that waits as the seed's does between gets (SPEC 8): it
        makes its FIFO W/TO_{uuid4 hex} (and no Go sleepers count), prints
        "ready", then for each KEY in turn sleeps in select() on the FIFO
        (60 s at most: it never polls otherwise), drains it, and tries one
        get; on a hit it prints what get prints and goes on to the next KEY.
        It removes its FIFO before it exits, also when its input ends.
    peer.py segput KEY HEXFILE [--wrap]
        Publishes the bytes as a per-key segment (SPEC 6), prints its
        descriptor, then, on a line from stdin, retires it if still unclaimed
        and prints "closed". --wrap writes the OMNIIPC1 form some Python
        builds use: "OMNIIPC1", big-endian u64 length and u32 CRC-32, payload.
    peer.py segget KEY [--timeout S]
        Claims the per-key segment (SPEC 6); prints {"size", "data"} or null.
    peer.py claimall SCOPE FROM TO KEYFILE PASSES [--segments]
        Prints "ready", waits for a line, then tries to claim every key of
        KEYFILE (one per line) PASSES times over, through the ring (or the
        per-key path with --segments), racing other receivers; prints one
        JSON object {key: {"kind", "size", "data"}} of what it claimed.
    peer.py scan RINGFILE
        Lists the ready frames of a ring file with the seed's own
        _Channel.scan, without attaching to a producer: one JSON line per
        frame, {"key", "position", "kind", "size", "data"}.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import mmap
import os
import select
import stat
import struct
import sys
import time
import uuid
import zlib
from multiprocessing import shared_memory as shm_pkg


# Shims for the package-relative imports of shm_ring_peer.py.
def get_connector_logger(name: str) -> logging.Logger:
    return logging.getLogger(name)


class TensorFrame:
    """Stands for utils.tensor_frame.TensorFrame: a prepared frame's bytes.

    The Go side makes the frame (frame.Prepare + Write); the ring only needs
    its size and a write into locked ring memory.
    """

    def __init__(self, data: bytes):
        if len(data) < 4:
            raise ValueError("truncated tensor frame")
        header_size = struct.unpack_from("<I", data)[0]
        self.header = bytes(data[4 : 4 + header_size])
        self.data = bytes(data)
        self.size = len(self.data)

    def write(self, buffer: memoryview, start: int) -> None:
        buffer[start : start + self.size] = self.data


class TensorFrameBytes(bytes):
    """The raw bytes of a kind-1 frame; a distinct type tells the kind apart."""


def read_tensor_frame(view: memoryview) -> object:
    # The Go test decodes the frame itself: copy its bytes out, nothing more.
    return TensorFrameBytes(view)


# shm_ring_peer.py imports the shims above from the module "peer": when this
# file runs as __main__, make that name refer to it instead of a second copy.
sys.modules.setdefault("peer", sys.modules[__name__])

from shm_ring_peer import HostRingTransport, _Channel  # noqa: E402

_RING_BYTES = 4 << 20


def wake_dir_of(scope: str | None) -> str:
    """SPEC 2: W, whose path string names the ring directory (H(W)).

    The command line's SCOPE "@none" stands for no wakeup_scope (None): W is
    then keyed by the parent pid. Any other string, even "", is a scope, as
    in the connector (`scope is not None`).
    """
    if scope == "@none":
        scope = None
    if scope is None:
        return f"/dev/shm/omni_shm_wake_{os.getuid()}_{os.getppid()}"
    return f"/dev/shm/omni_shm_wake_{os.getuid()}_{hashlib.sha256(scope.encode()).hexdigest()[:24]}"


def say(value: object) -> None:
    print(value if isinstance(value, str) else json.dumps(value), flush=True)


def read_hex(path: str) -> bytes:
    with open(path) as file:
        return bytes.fromhex(file.read().strip())


def poll(attempt, timeout: float):
    deadline = time.monotonic() + timeout
    while True:
        result = attempt()
        if result is not None or time.monotonic() >= deadline:
            return result
        time.sleep(0.001)


def split_option(args: list[str], name: str, default: str) -> tuple[list[str], str]:
    if name in args:
        i = args.index(name)
        return args[:i] + args[i + 2 :], args[i + 1]
    return args, default


def wake(directory: str, stage: str) -> None:
    """SPEC 8: one zero byte, non-blocking, to every FIFO of the stage; errors ignored."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if not name.startswith(f"{stage}_"):
            continue
        try:
            fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, b"\0")
        except OSError:
            pass
        finally:
            os.close(fd)


def publish(ring: HostRingTransport, source: str, destination: str, key: str, kind: str, path: str, waker=None) -> None:
    data = read_hex(path)
    payload = TensorFrame(data) if kind == "1" else data
    meta = ring.put(source, destination, key, payload)
    if meta is not None and waker is not None:
        waker()
    say(None if meta is None else {"host_ring": meta, "size": meta["size"]})


def cmd_put(args: list[str]) -> int:
    args, ring_bytes = split_option(args, "--ring-bytes", str(_RING_BYTES))
    waking = "--wake" in args
    args = [arg for arg in args if arg != "--wake"]
    scope, source, destination = args[:3]
    triples = args[3:]
    if not triples or len(triples) % 3:
        raise SystemExit("put: want KEY KIND HEXFILE triples")
    ring = HostRingTransport(wake_dir_of(scope), int(ring_bytes))
    waker = (lambda: wake(wake_dir_of(scope), destination)) if waking else None
    for i in range(0, len(triples), 3):
        publish(ring, source, destination, *triples[i : i + 3], waker=waker)
    say("ready")
    for line in sys.stdin:
        words = line.split()
        if len(words) == 4 and words[0] == "put":
            publish(ring, source, destination, *words[1:], waker=waker)
            continue
        if len(words) == 2 and words[0] == "cancel":
            say(ring.cancel(key=words[1]))
            continue
        if len(words) == 2 and words[0] == "cancel_prefix":
            say(ring.cancel(prefix=words[1]))
            continue
        if words == ["crash"]:
            # A producer that dies without close(): its ring stays behind (the
            # resource tracker unlinks the file later), its marker too.
            os._exit(0)
        break
    ring.close()
    say("closed")
    return 0


def say_received(result) -> None:
    if result is None:
        say(None)
    else:
        data, size = result
        say({"kind": 1 if isinstance(data, TensorFrameBytes) else 0, "size": size, "data": bytes(data).hex()})


def ring_descriptor(key: str, descriptor: object) -> dict | None:
    """The "host_ring" part of a connector descriptor, as the connector's get() picks it."""
    if isinstance(descriptor, dict) and key in descriptor:
        descriptor = descriptor[key]
    return descriptor.get("host_ring") if isinstance(descriptor, dict) else None


def cmd_get(args: list[str]) -> int:
    args, timeout = split_option(args, "--timeout", "10")
    scope, source, destination, key = args[:4]
    ring_meta = ring_descriptor(key, json.loads(args[4]) if len(args) > 4 else None)
    ring = HostRingTransport(wake_dir_of(scope), _RING_BYTES)
    try:
        say_received(poll(lambda: ring.get(source, destination, key, ring_meta), float(timeout)))
    finally:
        ring.close()
    return 0


def cmd_serve(args: list[str]) -> int:
    scope, source, destination = args
    ring = HostRingTransport(wake_dir_of(scope), _RING_BYTES)
    say("ready")
    try:
        for line in sys.stdin:
            words = line.strip().split(" ", 2)
            if not words[0]:
                break
            key, timeout = words[0], float(words[1])
            ring_meta = ring_descriptor(key, json.loads(words[2]) if len(words) > 2 else None)
            say_received(poll(lambda: ring.get(source, destination, key, ring_meta), timeout))
    finally:
        ring.close()
    say("closed")
    return 0


def cmd_sleep(args: list[str]) -> int:
    scope, source, destination, keys = args[0], args[1], args[2], args[3:]
    directory = wake_dir_of(scope)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.join(directory, f"{destination}_{uuid.uuid4().hex}")
    os.mkfifo(path, 0o600)
    rfd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    wfd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # never EOF
    ring = HostRingTransport(directory, _RING_BYTES)
    say("ready")
    try:
        for key in keys:
            while True:
                ready, _, _ = select.select([rfd, sys.stdin], [], [], 60)
                if not ready:
                    say(None)  # no wakeup within a minute
                    return 1
                if sys.stdin in ready and not sys.stdin.readline():
                    return 1  # the test gave up: leave, cleaning up
                if rfd not in ready:
                    continue
                try:
                    os.read(rfd, 512)
                except BlockingIOError:
                    pass
                result = ring.get(source, destination, key, None)
                if result is not None:
                    say_received(result)
                    break
    finally:
        ring.close()
        os.close(rfd)
        os.close(wfd)
        os.unlink(path)
        try:
            os.rmdir(directory)
        except OSError:
            pass
    return 0


# Per-key segments (SPEC 6). The lock file guards one key's segment; whoever
# holds it exclusively may create, read or unlink the segment.
def lock_path(key: str) -> str:
    return f"/dev/shm/shm_{key}_lockfile.lock"


def same_file(fd: int, path: str) -> bool:
    try:
        now = os.lstat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)


def lock_for_producer(key: str) -> int:
    """Open/create the lock file and lock it, reopening if a receiver removed it."""
    for _ in range(3):
        fd = os.open(lock_path(key), os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        if same_file(fd, lock_path(key)):
            return fd
        os.close(fd)
    raise OSError(errno.EAGAIN, "lock file replaced while locking", lock_path(key))


def cmd_segput(args: list[str]) -> int:
    wrap = "--wrap" in args
    key, path = [arg for arg in args if arg != "--wrap"]
    data = read_hex(path)
    if wrap:
        data = b"OMNIIPC1" + struct.pack(">QI", len(data), zlib.crc32(data)) + data
    fd = lock_for_producer(key)
    try:
        try:
            segment = shm_pkg.SharedMemory(name=key, create=True, size=len(data))
        except FileExistsError:
            # Replace an unclaimed version: we hold the key's lock.
            os.unlink(f"/dev/shm/{key}")
            segment = shm_pkg.SharedMemory(name=key, create=True, size=len(data))
        segment.buf[: len(data)] = data
        segment.close()
    finally:
        os.close(fd)
    say({"shm": {"name": key, "size": len(data)}, "size": len(data)})
    sys.stdin.readline()
    # close(): retire the key if no receiver claimed it.
    fd = lock_for_producer(key)
    try:
        try:
            os.unlink(f"/dev/shm/{key}")
        except FileNotFoundError:
            pass
        os.unlink(lock_path(key))
    finally:
        os.close(fd)
    say("closed")
    return 0


def claim_segment(key: str) -> bytes | None:
    """The seed's _get_by_key / _get_data_with_lock, as SPEC 6 states it."""
    try:
        size = os.stat(f"/dev/shm/{key}").st_size
    except FileNotFoundError:
        return None
    if size == 0:
        return None
    try:
        fd = os.open(lock_path(key), os.O_RDWR | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        if not same_file(fd, lock_path(key)):
            return None
        try:
            segment = shm_pkg.SharedMemory(name=key)
        except FileNotFoundError:
            return None
        try:
            data = bytes(segment.buf[: segment.size])
        finally:
            segment.close()
            # unlink() also drops the attach's resource tracker registration.
            segment.unlink()
        os.unlink(lock_path(key))
        return data
    finally:
        os.close(fd)


def cmd_segget(args: list[str]) -> int:
    args, timeout = split_option(args, "--timeout", "10")
    (key,) = args
    data = poll(lambda: claim_segment(key), float(timeout))
    say(None if data is None else {"size": len(data), "data": data.hex()})
    return 0


def cmd_claimall(args: list[str]) -> int:
    segments = "--segments" in args
    scope, source, destination, path, passes = [arg for arg in args if arg != "--segments"]
    with open(path) as file:
        keys = [line.strip() for line in file if line.strip()]
    ring = HostRingTransport(wake_dir_of(scope), _RING_BYTES)
    claimed: dict[str, dict] = {}
    try:
        say("ready")
        sys.stdin.readline()
        for _ in range(int(passes)):
            for key in keys:
                if key in claimed:
                    continue
                if segments:
                    data = claim_segment(key)
                    if data is not None:
                        claimed[key] = {"kind": 0, "size": len(data), "data": data.hex()}
                    continue
                result = ring.get(source, destination, key, None)
                if result is not None:
                    data, size = result
                    kind = 1 if isinstance(data, TensorFrameBytes) else 0
                    claimed[key] = {"kind": kind, "size": size, "data": bytes(data).hex()}
    finally:
        ring.close()
    say(claimed)
    return 0


def cmd_scan(args: list[str]) -> int:
    (path,) = args
    with open(path, "rb") as file:
        mapping = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        # The seed's header check, then its scan over the frames: no attach
        # (the file's creator is long gone) and no writes.
        magic, capacity, head, tail, pid, start = struct.unpack_from("<8sQQQQQ", mapping)
        if magic != b"OMSHMR01" or capacity != len(mapping) - 64 or not 0 <= tail <= head:
            raise ValueError("invalid SHM ring header")
        channel = _Channel(os.path.basename(path), -1, mapping, capacity, False, pid, start)
        channel.scan()
        for key, position in channel.index.items():
            _total, length, kind, _state, key_length, _reserved = channel.frame(position)
            begin = 64 + position % capacity + 16 + key_length
            say({"key": key, "position": position, "kind": kind, "size": length, "data": mapping[begin : begin + length].hex()})
    finally:
        mapping.close()
    return 0


def main(argv: list[str]) -> int:
    commands = {
        "put": cmd_put,
        "get": cmd_get,
        "serve": cmd_serve,
        "sleep": cmd_sleep,
        "claimall": cmd_claimall,
        "segput": cmd_segput,
        "segget": cmd_segget,
        "scan": cmd_scan,
    }
    if not argv or argv[0] not in commands:
        print(__doc__, file=sys.stderr)
        return 2
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
