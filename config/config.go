// Package config reads the connector configuration of SPEC §9: the YAML
// `connectors` map that both endpoints of an edge share.
package config

import (
	"errors"
	"fmt"
	"omnishm/ring"
	"os"
	"strconv"
	"strings"
	"time"
)

// SharedMemoryConnector is the name of the local transport, as in the
// Python deployment's configuration.
const SharedMemoryConnector = "SharedMemoryConnector"

// NatsConnector is the name of the transport between hosts over NATS
// JetStream (package natsconn, which registers it with connector.New).
const NatsConnector = "NatsConnector"

// MaxNatsReplicas bounds Nats.Replicas, as JetStream does.
const MaxNatsReplicas = 5

// NoStage is Extra.StageID when the configuration names no stage.
const NoStage = -1

// ErrInvalid is wrapped by every error about a configuration's content.
var ErrInvalid = errors.New("invalid connector configuration")

// Config is a parsed configuration file.
type Config struct {
	// Connectors maps the configuration's own names (the YAML keys) to
	// connectors.
	Connectors map[string]Connector
}

// Connector is one entry of `connectors`.
type Connector struct {
	Name  string
	Extra Extra
}

// Extra holds a connector's `extra` settings.
type Extra struct {
	// HostRingBytes is the ring size per producer and edge; 0 means per-key
	// segments only.
	HostRingBytes int
	// WakeupScope names the deployment (SPEC §2); empty means no scope.
	WakeupScope string
	// StageID is this endpoint's stage, or NoStage.
	StageID int
	// Nats holds NatsConnector's settings; it is zero for other connectors.
	Nats Nats
}

// Nats holds the `extra` settings of a NatsConnector, and is the settings
// part of natsconn.Options. A zero field means the default package
// natsconn names.
type Nats struct {
	// URL is the server, or several separated by commas; "" means
	// natsconn.DefaultURL.
	URL string
	// Credentials is the path of a NATS credentials (.creds) file, if any.
	Credentials string
	// Bucket is the key-value bucket holding the publications; "" means
	// natsconn.DefaultBucket. Both ends of an edge must use the same one.
	Bucket string
	// ObjectStore holds payloads above the server's maximum message size;
	// "" means Bucket + "_large".
	ObjectStore string
	// MaxAge is how long an unclaimed payload stays before the server drops
	// it; 0 means natsconn.DefaultMaxAge.
	MaxAge time.Duration
	// Timeout bounds each operation's wait for the server, including the
	// wait for a lost connection to come back; an operation moving a large
	// payload gets the time its bytes take at 32 MiB/s on top. 0 means
	// natsconn.DefaultTimeout.
	Timeout time.Duration
	// Replicas is the bucket's and the object store's replica count in a
	// cluster; 0 means 1.
	Replicas int
	// Storage is "file" (also "") or "memory": publications in the servers'
	// memory, faster, but a server restart loses them.
	Storage string
}

// Default returns the shared-memory connector with every default: a 4 MiB
// ring, no scope, no stage.
func Default() Connector {
	return Connector{
		Name:  SharedMemoryConnector,
		Extra: Extra{HostRingBytes: ring.DefaultCapacity, StageID: NoStage},
	}
}

// Validate reports the first setting of c that no connector accepts, naming
// its field, wrapped with ErrInvalid.
func (c Connector) Validate() error {
	if err := checkName(c.Name); err != nil {
		return err
	}
	if c.Extra.StageID < NoStage {
		return invalid("extra.stage_id", "%d is negative", c.Extra.StageID)
	}
	if c.Name == NatsConnector {
		if c.Extra.HostRingBytes != 0 || c.Extra.WakeupScope != "" {
			return invalid("extra", "host_ring_bytes and wakeup_scope are SharedMemoryConnector settings")
		}
		return c.Extra.Nats.Validate()
	}
	if c.Extra.Nats != (Nats{}) {
		return invalid("extra", "NATS settings on a %s", c.Name)
	}
	return checkRingBytes(c.Extra.HostRingBytes)
}

func checkName(name string) error {
	switch name {
	case SharedMemoryConnector, NatsConnector:
		return nil
	case "":
		return invalid("name", "missing")
	}
	return invalid("name", "unknown connector %q (known: %s, %s)", name, SharedMemoryConnector, NatsConnector)
}

// Validate reports the first setting of n no NATS connector accepts, in
// field order, naming its field, wrapped with ErrInvalid. natsconn.Open
// calls it on its Options.
func (n Nats) Validate() error {
	for _, check := range []func() error{
		func() error { return checkURL(n.URL) },
		func() error { return checkBucket("extra.bucket", n.Bucket) },
		func() error { return checkBucket("extra.object_store", n.ObjectStore) },
		func() error { return checkDuration("extra.max_age", n.MaxAge, time.Second) },
		func() error { return checkDuration("extra.timeout", n.Timeout, time.Millisecond) },
		func() error { return checkReplicas(n.Replicas) },
		func() error { return checkStorage(n.Storage) },
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func checkURL(url string) error {
	if url == "" {
		return nil
	}
	for _, u := range strings.Split(url, ",") {
		if u = strings.TrimSpace(u); u == "" || strings.ContainsAny(u, " \t\n") {
			return invalid("extra.url", "%q is not a list of server URLs", url)
		}
	}
	return nil
}

// checkBucket accepts the names JetStream accepts for buckets and object stores.
func checkBucket(field, name string) error {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return invalid(field, "%q may hold only letters, digits, '_' and '-'", name)
		}
	}
	return nil
}

func checkDuration(field string, d, least time.Duration) error {
	if d != 0 && d < least {
		return invalid(field, "%v is under %v", d, least)
	}
	return nil
}

func checkReplicas(n int) error {
	if n < 0 || n > MaxNatsReplicas {
		return invalid("extra.replicas", "%d is outside 1..%d", n, MaxNatsReplicas)
	}
	return nil
}

func checkStorage(s string) error {
	if s != "" && s != "file" && s != "memory" {
		return invalid("extra.storage", "%q is neither file nor memory", s)
	}
	return nil
}

func checkRingBytes(n int) error {
	if ring.CheckCapacity(n) != nil {
		return invalid("extra.host_ring_bytes", "%d is outside 0 or %d..%d", n, ring.MinCapacity, ring.MaxCapacity)
	}
	return nil
}

// fieldError is a problem with one field, found by its dotted path.
type fieldError struct {
	field string
	line  int
	msg   string
}

func (e *fieldError) Error() string {
	if e.line > 0 {
		return "config: line " + strconv.Itoa(e.line) + ": " + e.field + ": " + e.msg
	}
	return "config: " + e.field + ": " + e.msg
}

func (e *fieldError) Unwrap() error { return ErrInvalid }

func invalid(field, format string, a ...any) error {
	return &fieldError{field: field, msg: fmt.Sprintf(format, a...)}
}

// Load reads and parses the configuration file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}
